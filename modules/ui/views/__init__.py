"""Thin customtkinter widgets over modules/ui/controllers: one file per tab, plus the top and bottom
bars and the main window. Widgets are generated from the config fields' metadata (widgets.py)."""
from modules.ui.views.ctk_fonts import import_customtkinter

import_customtkinter()  # before any view module imports it: ~/.fonts is then left alone (ctk_fonts.py says why)
