"""The desktop GUI (customtkinter).

`controllers/` holds all the logic and imports no Tk (they are unit-tested without a display);
`views/` holds thin widgets, generated from the typed configs' field metadata, one file per tab.
"""
