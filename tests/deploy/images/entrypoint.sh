#!/bin/sh
# What the official images' entrypoints do, as far as docker-compose.yml relies on it:
#   postgres ...      first start: a cluster in $PGDATA with the superuser $POSTGRES_USER (password
#                     $POSTGRES_PASSWORD, scram-sha-256 over the network) and the database
#                     $POSTGRES_DB; then the server on every address, as the user postgres.
#   redis-server ...  the server on every address without protected mode, as the user redis.
set -eu
case "${1:-}" in
postgres)
    : "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
    : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
    mkdir -p "$PGDATA" /run/postgresql
    chown postgres:postgres "$PGDATA" /run/postgresql
    chmod 700 "$PGDATA"
    as_postgres="setpriv --reuid=postgres --regid=postgres --init-groups --"
    if [ ! -s "$PGDATA/PG_VERSION" ]; then
        pwfile=$(mktemp)
        printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
        chown postgres "$pwfile"
        $as_postgres initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 \
            --auth-local=trust --auth-host=scram-sha-256 >/dev/null
        rm -f "$pwfile"
        printf 'host all all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf"
        # jit off: the rootfs goes without LLVM (engine.py's TRIM)
        printf "listen_addresses = '*'\njit = off\n" >> "$PGDATA/postgresql.conf"
        $as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
        if [ "$POSTGRES_DB" != postgres ]; then
            $as_postgres createdb -U "$POSTGRES_USER" "$POSTGRES_DB"
        fi
        $as_postgres pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
        echo "entrypoint: initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
    fi
    exec $as_postgres "$@"
    ;;
redis-server)
    cd /var/lib/redis
    shift
    exec setpriv --reuid=redis --regid=redis --init-groups -- redis-server "$@" --protected-mode no
    ;;
esac
exec "$@"
