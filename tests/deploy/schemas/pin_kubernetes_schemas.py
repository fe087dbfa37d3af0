"""Re-create kubernetes/ from a kubernetes-validate wheel: the schemas of the kinds in deploy/kubernetes/.

    .venv/bin/pip download --no-deps kubernetes-validate==1.37.0 -d /tmp/kv
    .venv/bin/python tests/deploy/schemas/pin_kubernetes_schemas.py \
        /tmp/kv/kubernetes_validate-1.37.0-py3-none-any.whl

The kind schemas are copied byte for byte. Their shared ``_definitions.json`` is 1.4 MB for every API type of
Kubernetes, so only the ``$defs`` entries these kinds reach (transitively) are kept, each one unchanged; the
validation result is the same because nothing else is ever referenced. Why not a dev dependency on the
package instead: the pinned files keep the test offline and its result independent of package upgrades.
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SCHEMA_SET = "v1.37.0-local-strict"
KINDS = ("configmap-v1", "namespace-v1", "service-v1", "statefulset-apps-v1")
OUT = Path(__file__).resolve().parent / "kubernetes" / SCHEMA_SET
_ROOT = f"kubernetes_validate/kubernetes-json-schema/{SCHEMA_SET}/"
# Kind files point into the definitions file; definitions point at each other within it.
_DEFS_REFS = ("/api/_definitions.json#/$defs/", "#/$defs/")


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path)
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(args.wheel) as wheel:
        definitions = json.loads(wheel.read(_ROOT + "_definitions.json"))
        pending: list[str] = []
        for kind in KINDS:
            raw = wheel.read(f"{_ROOT}{kind}.json")
            (OUT / f"{kind}.json").write_bytes(raw)
            pending.extend(refs(json.loads(raw)))
    kept: dict[str, Any] = {}
    while pending:
        ref = pending.pop()
        prefix = next((p for p in _DEFS_REFS if ref.startswith(p)), None)
        if prefix is None:
            print(f"unexpected $ref {ref!r}", file=sys.stderr)
            return 1
        name = ref.removeprefix(prefix)
        if name not in kept:
            kept[name] = definitions["$defs"][name]
            pending.extend(refs(kept[name]))
    subset = {key: value for key, value in definitions.items() if key != "$defs"}
    subset["$defs"] = dict(sorted(kept.items()))
    (OUT / "_definitions.json").write_text(json.dumps(subset, indent=1, sort_keys=False) + "\n")
    print(f"{len(KINDS)} kinds, {len(kept)} of {len(definitions['$defs'])} definitions -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
