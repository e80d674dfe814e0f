"""The bottom layer every app stands on; it imports no app (docs/design.md §2)."""
