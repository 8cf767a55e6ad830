from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("relay", "0008_worker_progress_and_samples"),  # asked: 0007; another 0008 landed meanwhile
    ]

    operations = [
        migrations.CreateModel(
            name="SchemaBaseline",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("source", models.CharField(max_length=255, unique=True)),
                ("binlog_file", models.CharField(max_length=255)),
                ("binlog_pos", models.BigIntegerField()),
                ("gtid", models.TextField(blank=True, default="")),
                ("taken", models.DateTimeField(auto_now=True)),
                ("lower_case_table_names", models.PositiveSmallIntegerField(default=0)),
                ("server_charset", models.CharField(default="utf8mb4", max_length=64)),
                ("databases", models.JSONField(default=dict, help_text="database name -> default charset")),
            ],
        ),
        migrations.CreateModel(
            name="SchemaVersion",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("source", models.CharField(max_length=255)),
                ("schema_name", models.CharField(max_length=255)),
                ("table_name", models.CharField(max_length=255)),
                ("binlog_file", models.CharField(max_length=255)),
                ("binlog_pos", models.BigIntegerField()),
                (
                    "gtid",
                    models.TextField(blank=True, default="", help_text="the GTID of the DDL that made this version"),
                ),
                ("exists", models.BooleanField(default=True)),
                (
                    "columns",
                    models.JSONField(
                        default=list, help_text="[name, data_type, column_type, charset, nullable] per column"
                    ),
                ),
                ("primary_key", models.JSONField(default=list)),
                ("charset", models.CharField(blank=True, default="", max_length=64)),
                ("statement", models.TextField(blank=True, default="")),
                ("baseline", models.BooleanField(default=False)),
                ("recorded", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["source", "binlog_file", "binlog_pos", "id"],
                "indexes": [models.Index(fields=["source", "schema_name", "table_name"], name="schema_version_table")],
            },
        ),
    ]
