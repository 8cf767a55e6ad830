from django.db import migrations, models


def create_version_row(apps, schema_editor):
    apps.get_model("relay", "FilterVersion").objects.get_or_create(id=1, defaults={"version": 0})


class Migration(migrations.Migration):

    dependencies = [
        ('relay', '0006_relay_process'),
    ]

    operations = [
        migrations.CreateModel(
            name='FilterVersion',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('version', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(create_version_row, migrations.RunPython.noop),
    ]
