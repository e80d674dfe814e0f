"""Seeds the four domain profiles (see missions.profile_seeds)."""

from django.db import migrations


def seed(apps, schema_editor):  # type: ignore[no-untyped-def]
    from missions import profile_seeds

    profile_seeds.seed(apps.get_model("missions", "Profile"))


class Migration(migrations.Migration):
    dependencies = [("missions", "0022_profiles")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
