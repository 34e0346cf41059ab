"""Planted bugs that the contracts catch, kept apart from the correct code as CrossHair's
own examples are (``crosshair/examples/PEP316/bugs_detected``)."""
