"""Thin customtkinter widgets over modules/ui/controllers: one file per tab, plus the top and bottom
bars and the main window. Widgets are generated from the config fields' metadata (widgets.py)."""
