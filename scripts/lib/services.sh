# shellcheck shell=bash
# Set-up shared by ./scripts/demo, ./scripts/test and .ci/run: make sure the
# Rust toolchain, PostgreSQL and RabbitMQ are installed and running, and that
# PostgreSQL has the `clarion` role and database. Safe to run again and again:
# whatever is already installed and running is used as it is.

CLARION_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CLARION_DB_USER=clarion
CLARION_DB_PASSWORD=clarion
CLARION_DB_NAME=clarion
PG_PORT=5432
AMQP_PORT=5672

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    (cd / && sudo -u postgres "$@")
  fi
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

apt_install() {
  say "installing $* from the OS packages"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

ensure_toolchain() {
  local missing=()
  command -v cc >/dev/null 2>&1 || missing+=(build-essential)
  command -v curl >/dev/null 2>&1 || missing+=(curl ca-certificates)
  [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
  if ! command -v cargo >/dev/null 2>&1; then
    # shellcheck disable=SC1091
    [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    say "installing the Rust toolchain with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
      sh -s -- -y --profile minimal --component rustfmt,clippy
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
  fi
}

# Headless Chromium and its WebDriver for the console's browser tests
# (load-tests/tests/console/): Debian's chromium and chromium-driver.
ensure_browser() {
  if command -v chromedriver >/dev/null 2>&1 &&
    { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }; then
    return
  fi
  apt_install chromium chromium-driver
}

ensure_packages() {
  local missing=()
  command -v pg_ctlcluster >/dev/null 2>&1 || [ -x /usr/bin/pg_ctlcluster ] || missing+=(postgresql)
  [ -x /usr/sbin/rabbitmq-server ] || missing+=(rabbitmq-server)
  [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
}

start_postgres() {
  if port_open "$PG_PORT"; then return; fi
  say "starting PostgreSQL"
  local version name
  # shellcheck disable=SC2034
  while read -r version name _; do
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start || true
  done < <(pg_lsclusters --no-header 2>/dev/null)
  port_open "$PG_PORT" || as_root service postgresql start >/dev/null 2>&1 || true
  for _ in $(seq 60); do
    port_open "$PG_PORT" && return
    sleep 0.5
  done
  echo "PostgreSQL did not start on 127.0.0.1:$PG_PORT; see /var/log/postgresql/" >&2
  return 1
}

start_rabbitmq() {
  if port_open "$AMQP_PORT"; then return; fi
  say "starting RabbitMQ"
  as_root rabbitmq-server -detached >/dev/null 2>&1 || true
  # The node registers with epmd a moment after -detached returns; until
  # then await_startup fails at once, so retry it.
  local deadline=$((SECONDS + 120))
  until as_root rabbitmqctl -q await_startup >/dev/null 2>&1 && port_open "$AMQP_PORT"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "RabbitMQ did not start on 127.0.0.1:$AMQP_PORT; see /var/log/rabbitmq/" >&2
      return 1
    fi
    sleep 1
  done
}

# A role with a password works whatever the server's authentication method
# (a fresh install asks for scram passwords on 127.0.0.1; ours may trust).
ensure_database() {
  as_postgres psql -q -v ON_ERROR_STOP=1 -d postgres >/dev/null <<SQL
DO \$\$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$CLARION_DB_USER') THEN
    CREATE ROLE $CLARION_DB_USER LOGIN CREATEDB PASSWORD '$CLARION_DB_PASSWORD';
  ELSE
    ALTER ROLE $CLARION_DB_USER LOGIN CREATEDB PASSWORD '$CLARION_DB_PASSWORD';
  END IF;
END
\$\$;
SQL
  if [ "$(as_postgres psql -tA -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$CLARION_DB_NAME'")" != 1 ]; then
    as_postgres psql -q -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE $CLARION_DB_NAME OWNER $CLARION_DB_USER" >/dev/null
  fi
}

ensure_services() {
  ensure_packages
  start_postgres
  start_rabbitmq
  ensure_database
  export CLARION_DATABASE_URL=${CLARION_DATABASE_URL:-postgres://$CLARION_DB_USER:$CLARION_DB_PASSWORD@127.0.0.1:$PG_PORT/$CLARION_DB_NAME}
  export CLARION_AMQP_URL=${CLARION_AMQP_URL:-amqp://guest:guest@127.0.0.1:$AMQP_PORT/%2f}
  export CLARION_TEST_DATABASE_URL=${CLARION_TEST_DATABASE_URL:-postgres://$CLARION_DB_USER:$CLARION_DB_PASSWORD@127.0.0.1:$PG_PORT/postgres}
  export CLARION_TEST_AMQP_URL=${CLARION_TEST_AMQP_URL:-$CLARION_AMQP_URL}
}

# Where cargo puts its output, honouring CARGO_TARGET_DIR.
target_dir() {
  echo "${CARGO_TARGET_DIR:-$CLARION_ROOT/target}"
}

# mdBook, pinned, for building the docs book (docs/): installed with cargo
# only when that version is missing (a few minutes on two cores, once).
MDBOOK_VERSION=0.4.52
ensure_mdbook() {
  if command -v mdbook >/dev/null 2>&1 && [ "$(mdbook --version)" = "mdbook v$MDBOOK_VERSION" ]; then
    return
  fi
  say "installing mdbook $MDBOOK_VERSION with cargo (once)"
  cargo install mdbook --locked --version "$MDBOOK_VERSION"
}
