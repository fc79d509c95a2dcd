"""``llmsim presets``: the shipped workloads, topologies, models and validation cases.

::

    llmsim presets [--json PATH]
"""

from __future__ import annotations

import argparse

from sim.output.json_output import write_json

__all__ = ["register"]


def register(sub) -> None:
    """Add ``presets`` to ``llmsim``'s subcommands."""
    pre = sub.add_parser("presets", help="list the shipped workloads, topologies, models and validation cases",
                         description="List every preset llmsim ships, by group, with where it is installed: "
                         "commands take these names wherever they take a file.")
    pre.add_argument("--json", metavar="PATH", help="write the list as JSON")
    pre.set_defaults(func=_cmd_presets)


def _cmd_presets(args: argparse.Namespace) -> int:
    from sim.config.presets import PRESET_GROUPS, preset_root, presets

    found = presets()
    width = max(len(p.name) for p in found)
    print(f"llmsim presets, in {preset_root()}: a command takes a preset's name or a file's path; "
          "copy a file to edit it")
    for group, _folder, _suffix, used_by in PRESET_GROUPS:
        print(f"\n{group} ({used_by})")
        for p in (p for p in found if p.group == group):
            text = p.description if len(p.description) <= 90 else p.description[:87] + "..."
            print(f"  {p.name:<{width}}  {text}")
    if args.json:
        write_json(args.json, {"root": str(preset_root()), "presets": [p.to_dict() for p in found]})
    return 0
