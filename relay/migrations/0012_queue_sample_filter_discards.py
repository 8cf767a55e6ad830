from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('relay', '0011_worker_schema_problems'),
    ]

    operations = [
        migrations.AddField(
            model_name='queuesample',
            name='filter_discards',
            field=models.JSONField(default=dict, help_text="the discard total of each of the client's filters that discarded, by filter id"),
        ),
    ]
