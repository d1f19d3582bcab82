# tine's accessibility dump: the AT-SPI tree of every application on the
# session bus, as JSON on stdout (internal/desktop/a11y renders it as
# OSWorld's XML and as tine's compact form). Written for tine; it reads
# what OSWorld's guest reads, through the same pyatspi calls.
import json
import sys

import pyatspi

MAX_DEPTH = 50
MAX_WIDTH = 1024


def node(acc, depth):
    out = {"role": (acc.getRoleName() or "").strip(), "name": acc.name or ""}
    states = []
    for st in acc.getState().get_states():
        name = pyatspi.StateType._enum_lookup[st].split("_", 1)[1].lower()
        if name:
            states.append(name)
    out["states"] = states
    try:
        attrs = acc.get_attributes()
        out["attributes"] = [[k, v] for k, v in attrs.items() if k]
    except Exception:
        out["attributes"] = []
    if "visible" in states and "showing" in states:
        try:
            comp = acc.queryComponent()
        except NotImplementedError:
            pass
        else:
            out["bounds"] = list(comp.getExtents(pyatspi.XY_SCREEN))
    try:
        t = acc.queryText()
        out["text"] = t.getText(0, t.characterCount).replace("\ufffc", "").replace("\ufffd", "")
    except NotImplementedError:
        pass
    for iface, key in (("queryImage", "image"), ("querySelection", "selection")):
        try:
            getattr(acc, iface)()
            out[key] = True
        except NotImplementedError:
            pass
    try:
        v = acc.queryValue()
        vals = []
        for k, f in (("value", lambda: v.currentValue), ("min", lambda: v.minimumValue),
                     ("max", lambda: v.maximumValue), ("step", lambda: v.minimumIncrement)):
            try:
                vals.append([k, str(f())])
            except Exception:
                pass
        out["value"] = vals
    except NotImplementedError:
        pass
    try:
        a = acc.queryAction()
        out["actions"] = [[a.getName(i), a.getDescription(i), a.getKeyBinding(i)] for i in range(a.nActions)]
    except NotImplementedError:
        pass
    kids = []
    if depth < MAX_DEPTH:
        try:
            for i, ch in enumerate(acc):
                if i == MAX_WIDTH:
                    break
                if ch is not None:
                    kids.append(node(ch, depth + 1))
        except Exception:
            pass
    out["children"] = kids
    return out


desktop = pyatspi.Registry.getDesktop(0)
apps = []
for app in desktop:
    if app is None:
        continue
    try:
        apps.append(node(app, 1))
    except Exception as e:  # an application that went away meanwhile
        print("tine a11y: skipped an application: %s" % e, file=sys.stderr)
json.dump(apps, sys.stdout)
