# A GTK window with one button, for the accessibility tests: pressing it
# writes "pressed" to the file named by argv[1] and relabels the button.
import sys

import gi

gi.require_version("Gtk", "3.0")
from gi.repository import Gtk  # noqa: E402


def pressed(button):
    with open(sys.argv[1], "w") as f:
        f.write("pressed")
    button.set_label("Pressed")


win = Gtk.Window(title="a11y-test")
win.set_default_size(300, 200)
win.move(100, 100)
box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=10)
box.set_border_width(40)
button = Gtk.Button(label="Press me")
button.connect("clicked", pressed)
box.pack_start(button, True, True, 0)
win.add(box)
win.connect("destroy", Gtk.main_quit)
win.show_all()
Gtk.main()
