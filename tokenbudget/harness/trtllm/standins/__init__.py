"""What scheduler.py imports from TensorRT-LLM's C++ extension and torch-bound modules, as small
pure-Python stand-ins (``runtime.load`` publishes them under TensorRT-LLM's module names)."""
