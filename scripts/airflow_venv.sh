#!/usr/bin/env bash
# Creates the virtual environment the Airflow DAG test loads jobs/airflow_dag.py in.
#
# Airflow is not a dependency of the project: its DAG runs on an Airflow installation that
# spark-submits the jobs/ scripts. To check that the DAG file loads, this script installs Airflow
# 2.10 and its Spark provider into a separate venv, pinned to a set that installs and imports
# together on Python 3.11 (Airflow's own constraint files are not used: they are fetched from
# outside the package registry). pyspark is pinned to the project's version, which the provider
# requires and pip's wheel cache usually holds. A venv whose pins match is reused as is.
#
# Usage: scripts/airflow_venv.sh [VENV_DIR]   (default: tests/.venv-airflow)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${1:-$ROOT/tests/.venv-airflow}
PYTHON=${PYTHON:-python3.11}

die() { echo "airflow_venv: $*" >&2; exit 1; }
command -v "$PYTHON" >/dev/null || die "$PYTHON not found; set PYTHON to a Python 3.11 interpreter"

PINS=$(cat <<'PINS'
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
aiosmtplib==5.1.3
alembic==1.19.2
anyio==4.16.0
apache-airflow==2.10.5
apache-airflow-providers-apache-spark==4.11.3
apache-airflow-providers-common-compat==1.9.0
apache-airflow-providers-common-io==1.6.5
apache-airflow-providers-common-sql==1.29.0
apache-airflow-providers-fab==1.5.3
apache-airflow-providers-ftp==3.13.3
apache-airflow-providers-http==5.5.0
apache-airflow-providers-imap==3.9.4
apache-airflow-providers-smtp==2.3.2
apache-airflow-providers-sqlite==4.1.3
apispec==6.10.1
argcomplete==3.7.2
asgiref==3.13.0
attrs==26.1.0
babel==2.19.0
blinker==1.9.0
cachelib==0.17.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
clickclick==20.10.2
colorama==0.4.6
colorlog==6.12.0
ConfigUpdater==4.1.1
connexion==2.14.2
cron_descriptor==2.2.1
croniter==7.0.0
cryptography==50.0.2
Deprecated==1.3.1
dill==0.4.1
dnspython==2.9.2
email-validator==2.4.0
Flask==2.2.5
Flask-AppBuilder==4.5.3
Flask-Babel==2.0.0
Flask-Caching==2.4.1
Flask-JWT-Extended==4.7.4
Flask-Limiter==3.12
Flask-Login==0.6.3
Flask-Session==0.5.0
Flask-SQLAlchemy==2.5.1
Flask-WTF==1.3.0
frozenlist==1.8.0
fsspec==2026.9.0
google-re2==1.1.20251105
googleapis-common-protos==1.76.0
greenlet==3.5.6
grpcio==1.85.3
grpcio-status==1.85.3
gunicorn==27.0.1
h11==0.16.0
httpcore==1.0.9
httpx==0.28.1
idna==3.20
importlib_metadata==10.2.0
inflection==0.5.1
itsdangerous==2.2.0
Jinja2==3.1.6
jmespath==1.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
lazy-importer==0.1.0
lazy-object-proxy==1.13.0
limits==5.8.0
linkify-it-py==2.2.0
lockfile==0.12.2
Mako==1.4.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
marshmallow==3.26.2
marshmallow-oneofschema==3.2.0
marshmallow-sqlalchemy==0.28.2
mdit-py-plugins==0.7.0
mdurl==0.1.2
methodtools==0.4.7
more-itertools==11.2.1
multidict==7.2.1
opentelemetry-api==1.45.2
opentelemetry-exporter-http-transport==0.66b2
opentelemetry-exporter-otlp==1.45.2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-grpc==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2
opentelemetry-proto==1.45.2
opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions==0.66b2
ordered-set==4.1.0
packaging==26.4
pathlib_abc==0.5.2
pathspec==1.1.1
pendulum==3.3.0
pluggy==1.7.0
prison==0.2.1
propcache==0.5.4
protobuf==7.36.2
psutil==7.2.2
py4j==0.10.9.9
pycparser==3.12
Pygments==2.21.0
PyJWT==2.15.1
pyspark==4.0.5
python-daemon==3.1.2
python-dateutil==2.9.0.post0
python-nvd3==0.16.0
python-slugify==9.2.0
pytz==2026.6
PyYAML==6.0.4
referencing==0.37.0
requests==2.34.2
requests-toolbelt==1.0.0
rfc3339-validator==0.1.4
rich==13.9.4
rich-argparse==1.8.0
rpds-py==2026.9.1
setproctitle==1.3.8
six==1.17.0
SQLAlchemy==1.4.54
SQLAlchemy-JSONField==1.0.3
SQLAlchemy-Utils==0.42.1
sqlparse==0.6.1
tabulate==0.10.0
tenacity==9.2.1
termcolor==3.3.0
text-unidecode==1.3
typing_extensions==4.16.0
tzdata==2026.6
universal_pathlib==0.3.10
urllib3==2.8.0
Werkzeug==2.2.3
wirerope==1.0.0
wrapt==2.5.2
WTForms==3.3.2
yarl==1.25.1
zipp==4.1.2
PINS
)
STAMP="$VENV/.sparkml_par-pins"

if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PINS" ] \
   && "$VENV/bin/python" -c 'import airflow, airflow.providers.apache.spark' 2>/dev/null; then
  echo "airflow_venv: $VENV is up to date"
  exit 0
fi

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
printf '%s\n' "$PINS" > "$CONSTRAINTS"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  -c "$CONSTRAINTS" apache-airflow apache-airflow-providers-apache-spark \
  || die "pip could not install the pinned Airflow set into $VENV (see above)"
"$VENV/bin/python" -c 'import airflow, airflow.providers.apache.spark' \
  || die "Airflow installed into $VENV but does not import (see above)"
printf '%s' "$PINS" > "$STAMP"
echo "airflow_venv: installed Airflow $("$VENV/bin/python" -c 'import airflow; print(airflow.__version__)') into $VENV"
