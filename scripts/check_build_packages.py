#!/usr/bin/env python3
"""Checks that a configured and built tree used only files that the set-up
installs: every file the build read from the system (CMake's package configs
and find modules, every header the compiler opened, every library it linked,
every file path in CMakeCache.txt) must belong to a Debian package that
scripts/bootstrap.sh installs, or to one of their dependencies (Depends and
Pre-Depends, never Recommends: apt-get runs with --no-install-recommends), or
to an Essential package. A file from any other package is one a fresh machine
would not have: the build works here only because this machine happens to
have it (this is how Debian's libdnnl-dev, whose CMake config needs OpenCL
that the package only recommends, once broke the first command).

Files outside the package database are skipped when they are under
/usr/local (the CUDA toolkit, optional and found there by design), in the
source tree or in the build tree; any other unowned system file is reported.

usage: check_build_packages.py BUILD_DIR [--without PKG ...]
  --without PKG   check as if the bootstrap list lacked PKG (to see the check
                  fail: `--without ocl-icd-opencl-dev` must name that package)
Exit status: 0 every file accounted for; 1 files from packages the set-up
does not install (listed with their packages and what to add); 2 bad usage.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bootstrap_packages():
    out = subprocess.run([os.path.join(ROOT, "scripts", "bootstrap.sh"), "packages"],
                         check=True, capture_output=True, text=True).stdout
    return out.split()


def installed_packages():
    """name -> (essential, [alternative groups of Depends + Pre-Depends]), and
    virtual name -> [installed packages that provide it]."""
    fmt = "${Package}\t${Status}\t${Essential}\t${Depends}\t${Pre-Depends}\t${Provides}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], check=True, capture_output=True, text=True).stdout
    pkgs, provides = {}, {}
    for line in out.splitlines():
        name, status, essential, depends, predepends, prov = (line.split("\t") + [""] * 6)[:6]
        if not status.endswith(" installed"):
            continue
        groups = []
        for field in (depends, predepends):
            for group in filter(None, (g.strip() for g in field.split(","))):
                groups.append([re.split(r"[\s(:]", alt.strip(), 1)[0] for alt in group.split("|")])
        pkgs[name] = (essential == "yes", groups)
        for p in filter(None, (x.strip() for x in prov.split(","))):
            provides.setdefault(re.split(r"[\s(:]", p, 1)[0], []).append(name)
    return pkgs, provides


def closure(roots, pkgs, provides):
    """Every installed package the roots need, through Depends/Pre-Depends;
    an alternative group contributes its installed members."""
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for group in pkgs.get(p, (False, []))[1]:
            for alt in group:
                for real in ([alt] if alt in pkgs else []) + provides.get(alt, []):
                    if real not in seen:
                        todo.append(real)
    return seen


def file_owners():
    """path -> packages, from dpkg's file lists (both /usr and /lib spellings)."""
    owners = {}
    for lst in glob.glob("/var/lib/dpkg/info/*.list"):
        pkg = os.path.basename(lst)[:-5].split(":")[0]
        with open(lst, errors="replace") as f:
            for path in f.read().splitlines():
                owners.setdefault(path, set()).add(pkg)
    return owners


def owner_of(path, owners):
    for candidate in (path, os.path.realpath(path)):
        variants = {candidate}
        for a, b in (("/usr/lib/", "/lib/"), ("/usr/bin/", "/bin/"), ("/usr/sbin/", "/sbin/")):
            if candidate.startswith(a):
                variants.add(b + candidate[len(a):])
            elif candidate.startswith(b):
                variants.add(a + candidate[len(b):])
        for v in variants:
            if v in owners:
                return owners[v]
    return None


def files_used(build):
    """Absolute paths of existing system files the configure and build read."""
    paths = set()
    token = re.compile(r"(/(?:usr|lib|lib64|etc|opt)/[^\s;:\"'$]+)")
    cache = os.path.join(build, "CMakeCache.txt")
    with open(cache, errors="replace") as f:
        for line in f:
            if ":FILEPATH=" in line or ":PATH=" in line or ":STRING=" in line or ":INTERNAL=" in line:
                paths.update(token.findall(line.split("=", 1)[1]))
    with open(os.path.join(build, "build.ninja"), errors="replace") as f:
        for line in f:
            paths.update(token.findall(line))
    deps = subprocess.run(["ninja", "-C", build, "-t", "deps"], check=True, capture_output=True, text=True).stdout
    for line in deps.splitlines():
        s = line.strip()
        if s.startswith("/"):
            paths.add(s)
    return {os.path.normpath(p) for p in paths if os.path.isfile(p)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=True)
    ap.add_argument("build_dir")
    ap.add_argument("--without", action="append", default=[], metavar="PKG")
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    if not os.path.isfile(os.path.join(build, "build.ninja")):
        print(f"{build}: no build.ninja here; configure with -G Ninja (scripts/bootstrap.sh does) and build first",
              file=sys.stderr)
        return 2

    listed = [p for p in bootstrap_packages() if p not in args.without]
    pkgs, provides = installed_packages()
    missing = [p for p in listed if p not in pkgs]
    if missing:
        print(f"bootstrap packages not installed here: {' '.join(missing)} (run scripts/bootstrap.sh first)",
              file=sys.stderr)
        return 2
    essential = [p for p, (ess, _) in pkgs.items() if ess]
    allowed = closure(listed + essential, pkgs, provides)
    owners = file_owners()

    stray, unowned, checked = {}, [], 0
    for path in sorted(files_used(build)):
        if path.startswith(("/usr/local/", ROOT + "/", build + "/")):
            continue
        checked += 1
        who = owner_of(path, owners)
        if who is None:
            unowned.append(path)
        elif not (who & allowed):
            for p in sorted(who):
                stray.setdefault(p, []).append(path)

    if stray or unowned:
        for p, files in sorted(stray.items()):
            shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
            print(f"package {p} is used by the build ({shown}) but scripts/bootstrap.sh does not install it, nor "
                  f"does anything it installs depend on it: add {p} to its package list")
        for path in unowned:
            print(f"{path} is used by the build but belongs to no Debian package: a fresh machine will not have it")
        return 1
    print(f"ok: the {checked} system files the build used all come from the {len(listed)} packages "
          f"scripts/bootstrap.sh installs or their dependencies ({len(allowed)} packages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
