"""amplint's rules: one module per rule, named `ampNNN_<name>.py`."""
