"""Print the directory below PREFIX where this interpreter finds installed packages.

The interpreter's default place when it lies below PREFIX/lib (Debian: /usr/local ->
/usr/local/lib/python3.X/dist-packages), else Debian's system place for /usr
(/usr/lib/python3/dist-packages), else PREFIX/lib/python3.X/site-packages (then add it to
PYTHONPATH).
"""

import os
import sys
import sysconfig

prefix = os.path.normpath(sys.argv[1])
default = sysconfig.get_paths()["platlib"]
if default.startswith(os.path.join(prefix, "lib") + os.sep):
    print(default)
elif prefix == "/usr" and "deb_system" in sysconfig.get_scheme_names():
    print(sysconfig.get_path("platlib", "deb_system"))
else:
    print(sysconfig.get_path("platlib", "posix_prefix", vars={"base": prefix, "platbase": prefix}))
