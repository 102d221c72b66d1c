"""GUI logic without Tk: field metadata and parsing, the config being edited, list editors, the E2V
dataset document and its element table, presets, and the training worker thread.

Nothing in this package may import tkinter or customtkinter (a test checks it): views call these
objects from the Tk thread, and the training worker talks to the Tk thread only through a queue.
"""
