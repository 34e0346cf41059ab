"""SGLang's scheduler: its prefill-or-decode loop, policies and radix cache."""
