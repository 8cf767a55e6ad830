from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("relay", "0010_filter_discards"),  # asked: after 0009; 0010_filter_discards landed meanwhile
    ]

    operations = [
        migrations.AddField(
            model_name="workerstatus",
            name="schema_problems",
            field=models.BigIntegerField(
                default=0,
                help_text="TABLE_MAPs that disagreed with the schema history and DDL it could not read (rows went "
                "out with positional names @1, @2...)",
            ),
        ),
        migrations.AddField(
            model_name="workerstatus",
            name="last_schema_problem",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="workerstatus",
            name="last_schema_problem_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
