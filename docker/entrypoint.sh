#!/bin/sh
# Container entrypoint: fill in the address other peers should dial, then become distro-node.
#
# Why: the node listens on 0.0.0.0, which is not an address anyone can dial, and peers learn each other's
# addresses from what each one advertises. Replicas started with `docker compose up --scale node=N` cannot
# each be given an address in the compose file, but each container knows its own IP. So, unless the operator
# set DISTRO_NODE_NETWORK__ANNOUNCE_ADDRS, advertise /ip4/<this container's IP>/tcp/$CONTAINER_ANNOUNCE_PORT.
# Set CONTAINER_ANNOUNCE_PORT to an empty string to turn this off (for instance when a mounted config file
# sets network.announce_addrs: the variable set here would take precedence over the file).
set -eu

if [ -z "${DISTRO_NODE_NETWORK__ANNOUNCE_ADDRS:-}" ] && [ -n "${CONTAINER_ANNOUNCE_PORT:-}" ]; then
    # The address the container's hostname resolves to is the one on its (first) network; Python is used
    # because it is always in this image, unlike `hostname -i` or `ip`.
    ip="$(python -c 'import socket; print(socket.gethostbyname(socket.gethostname()))')"
    case "$ip" in
        127.*|"") echo "distro-node-entrypoint: no routable container address ($ip); not announcing one" >&2 ;;
        *) export DISTRO_NODE_NETWORK__ANNOUNCE_ADDRS="/ip4/$ip/tcp/$CONTAINER_ANNOUNCE_PORT" ;;
    esac
fi

exec distro-node "$@"
