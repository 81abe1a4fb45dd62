
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0003_run_ingest_token_nonce'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='auto_resume_count',
            field=models.PositiveSmallIntegerField(default=0),
        ),
    ]
