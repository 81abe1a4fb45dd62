
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0002_run_external_origin'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='ingest_token_nonce',
            field=models.CharField(blank=True, max_length=32),
        ),
    ]
