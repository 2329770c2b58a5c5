"""Applying fixes: text edits kept only when the result parses (`apply.py`), the
fix-and-relint loop over a project (`fixer.py`), and safe writes (`writer.py`).

The edit builders rules use live in the model (`amplint.model.edits`).
"""
