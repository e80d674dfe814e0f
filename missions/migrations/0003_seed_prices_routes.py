"""Seeds the first price version, the catalog and the role defaults (see missions.catalog)."""

from django.db import migrations


def seed(apps, schema_editor):  # type: ignore[no-untyped-def]
    from missions import catalog

    catalog.seed(
        apps.get_model("missions", "ModelPrice"),
        apps.get_model("missions", "ModelInfo"),
        apps.get_model("missions", "RoleRoute"),
    )


class Migration(migrations.Migration):
    dependencies = [("missions", "0002_catalog_prices_routes")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
