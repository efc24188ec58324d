#!/bin/sh
# Installs what the web UI's browser tests (cmd/agentd/webui_e2e_test.go)
# need: Debian's Chromium, driven from Go with chromedp (a Go module, so
# nothing else to install). Run it as root, or with sudo available, before
# `go test ./cmd/agentd/`. Without Chromium the tests skip and say why.
set -eu
for b in chromium chromium-browser google-chrome google-chrome-stable; do
	if command -v "$b" >/dev/null 2>&1; then
		echo "ci-install: $b is already installed: $("$b" --version 2>/dev/null || true)"
		exit 0
	fi
done
sudo=
if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
chromium --version
