#!/bin/sh
# tox -e site's commands_pre: Debian's chromium and chromedriver for the browser test
# (tests/test_site_browser.py). Installed with apt-get when missing and run as root; else one
# line saying what is missing, and the environment fails.
[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && exit 0
if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null \
        && exit 0
fi
echo "tox -e site: needs /usr/bin/chromium and /usr/bin/chromedriver: as root, apt-get install chromium chromium-driver" >&2
exit 1
