#!/usr/bin/env bash
# Creates the virtual environment the Airflow DAG test loads jobs/airflow_dag.py in.
#
# Airflow is not a dependency of the project: its DAG runs on an Airflow installation that
# spark-submits the jobs/ scripts. To check that the DAG file loads, this script installs Airflow
# 2.10 or 3.3 and its Spark provider into a separate venv, pinned to a set that installs and imports
# together on Python 3.11 (Airflow's own constraint files are not used: they are fetched from
# outside the package registry). A venv whose pins match is reused as is.
#
# Spark: the 2.10 provider (4.11) requires pyspark, pinned to the project's version, which pip's wheel
# cache usually holds. The 3.x provider (6.3) requires pyspark-client (Spark Connect's Python-only
# client, which installs the same pyspark package) instead, and pyspark only as its extra; pyspark is
# left out there, as the two would overwrite each other's files. Its pandas, numpy and pyarrow are the
# project's current stack (constraints-current.txt).
#
# Usage: scripts/airflow_venv.sh [VENV_DIR] [2|3]   (major version: $2, else $AIRFLOW_MAJOR, else 2;
#        default VENV_DIR: tests/.venv-airflow for 2, tests/.venv-airflow3 for 3)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MAJOR=${2:-${AIRFLOW_MAJOR:-2}}
PYTHON=${PYTHON:-python3.11}

die() { echo "airflow_venv: $*" >&2; exit 1; }
command -v "$PYTHON" >/dev/null || die "$PYTHON not found; set PYTHON to a Python 3.11 interpreter"

case "$MAJOR" in
  2)
    VENV=${1:-$ROOT/tests/.venv-airflow}
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
    ;;
  3)
    VENV=${1:-$ROOT/tests/.venv-airflow3}
    PINS=$(cat <<'PINS'
a2wsgi==1.10.10
aiosmtplib==5.1.3
aiosqlite==0.22.1
alembic==1.20.1
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
apache-airflow==3.3.2
apache-airflow-core==3.3.2
apache-airflow-providers-apache-spark==6.3.4
apache-airflow-providers-common-compat==1.23.0
apache-airflow-providers-common-io==1.11.0
apache-airflow-providers-common-sql==2.4.0
apache-airflow-providers-smtp==3.2.0
apache-airflow-providers-standard==1.21.0
apache-airflow-task-sdk==1.3.2
argcomplete==3.7.2
arrow==1.4.0
asgiref==3.13.0
attrs==26.1.0
babel==2.19.0
cachetools==8.0.2
cadwyn==7.0.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
colorlog==6.12.0
cron_descriptor==2.2.1
croniter==7.0.0
cryptography==50.0.2
Deprecated==1.3.1
dill==0.4.1
dnspython==2.9.2
email-validator==2.4.0
fastapi==0.136.3
fastapi-cli==0.0.34
fsspec==2026.9.0
googleapis-common-protos==1.76.0
greenback==1.3.0
greenlet==3.5.6
grpcio==1.85.3
grpcio-status==1.85.3
h11==0.16.0
httpcore==1.0.9
httptools==0.9.0
httpx==0.28.1
idna==3.20
importlib_metadata==10.2.0
isoduration==20.11.0
itsdangerous==2.2.0
Jinja2==3.1.6
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
lazy-importer==0.1.0
lazy-object-proxy==1.13.0
libcst==1.9.0
linkify-it-py==2.2.0
lockfile==0.12.2
Mako==1.4.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mdurl==0.1.2
methodtools==0.4.7
more-itertools==11.2.1
msgspec==0.23.0
natsort==8.4.0
numpy==2.4.6
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
outcome==1.3.0.post0
packaging==26.4
pandas==2.3.3
pathlib_abc==0.5.2
pathspec==1.1.1
pendulum==3.3.0
pluggy==1.7.0
protobuf==7.36.2
psutil==7.2.2
pyarrow==25.0.1
pycparser==3.12
pydantic==2.14.4
pydantic_core==2.50.5
pydantic-extra-types==2.11.1
pydantic-settings==2.16.3
Pygments==2.21.0
pygtrie==2.6.2
PyJWT==2.15.1
pyspark-client==4.2.0
python-daemon==3.1.2
python-dateutil==4.0.0
python-dotenv==1.2.4
python-multipart==0.0.34
python-slugify==9.2.0
pytz==2026.6
PyYAML==6.0.4
referencing==0.37.0
requests==2.34.2
rich==15.0.0
rich-argparse==1.8.0
rich-toolkit==0.20.6
rpds-py==2026.9.1
setproctitle==1.3.8
shellingham==1.5.4
six==1.17.0
sniffio==1.3.1
SQLAlchemy==2.1.9
sqlparse==0.6.1
starlette==1.10.0
structlog==26.1.0
svcs==26.2.0
tabulate==0.10.0
tenacity==9.2.1
termcolor==3.3.0
text-unidecode==1.3
typer==0.29.2
typing_extensions==4.16.0
typing-inspection==0.4.5
tzdata==2026.6
universal_pathlib==0.3.10
urllib3==2.8.0
uuid6==2025.0.1
uvicorn==0.54.0
uvloop==0.23.0
watchfiles==1.3.0
websockets==17.4
wirerope==1.0.0
wrapt==2.5.2
zipp==4.1.2
zstandard==0.25.0
PINS
)
    ;;
  *) die "Airflow major version must be 2 or 3, not '$MAJOR'" ;;
esac
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
