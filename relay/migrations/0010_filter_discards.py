from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('relay', '0009_schema_history'),
    ]

    operations = [
        migrations.AddField(
            model_name='filter',
            name='discarded',
            field=models.BigIntegerField(default=0, help_text="entries this filter's limit and policy dropped"),
        ),
        migrations.AddField(
            model_name='filter',
            name='last_discard',
            field=models.DateTimeField(blank=True, help_text='when this filter last dropped an entry', null=True),
        ),
    ]
