"""Steps journaled before request hashes read paths relative to the install's roots
(`agentos.core.roots`): the hash of each step whose request names a root is taken again, so a
run in flight at the upgrade replays its journal. Only those steps are touched."""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import migrations


def rehash(apps: Any, schema_editor: Any) -> None:
    # The live function, not a frozen copy: the point is to agree with what replays compute.
    from agentos.core import roots
    from kernel.journal import _encode_for_hash, request_hash

    step = apps.get_model("kernel", "Step")
    for path in set(roots.named().values()):
        rows = step.objects.filter(request__isnull=False).extra(
            where=["request::text LIKE %s"], params=[f"%{path}%"]
        )
        for pk, kind, name, request, old in rows.values_list(
            "pk", "kind", "name", "request", "request_hash"
        ).iterator(chunk_size=500):
            # Only a hash the stored request reproduces the old way is replaced: one that a
            # stored (scrubbed) request does not reproduce is left as it was.
            before = hashlib.sha256(_encode_for_hash([kind, name, request]).encode()).hexdigest()
            if old and old == before:
                step.objects.filter(pk=pk).update(request_hash=request_hash(kind, name, request))


class Migration(migrations.Migration):
    dependencies = [("kernel", "0024_provider_caps")]

    operations = [migrations.RunPython(rehash, migrations.RunPython.noop, elidable=True)]
