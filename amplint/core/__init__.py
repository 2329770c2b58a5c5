"""The bottom layer: what every other layer shares and nothing here imports from them.

Diagnostics, the configuration, the `Rule` base class, rule gates and their
evaluation, text edits by row/column, and `# noqa` reading. No libcst, no torch.
"""
