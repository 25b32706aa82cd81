"""Terminal UIs (optional extra ``tui``: textual + rich)."""
