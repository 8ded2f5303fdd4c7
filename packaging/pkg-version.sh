#!/bin/sh
# pkg-version.sh VERSION — turn a `git describe` string into a package version
# that dpkg and rpm both accept and order sensibly:
#   v1.2.3 -> 1.2.3   v1.2.3-4-gabc1234 -> 1.2.3+4.gabc1234
#   v1.3.0-rc1 -> 1.3.0~rc1 (sorts before 1.3.0)   abc1234-dirty -> 0.0.0~abc1234.dirty
#   21726cb -> 0.0.0~21726cb
set -eu
v=$(printf '%s' "${1:?usage: pkg-version.sh VERSION}" |
	sed -E 's/^v//; s/-([0-9]+)-g([0-9a-f]+)/+\1.g\2/; s/-dirty$/.dirty/; s/-/~/g; s/[^A-Za-z0-9.+~]/./g')
# Only a tag (MAJOR.MINOR...) is a release version; a bare commit hash may
# start with a digit too.
if printf '%s' "$v" | grep -Eq '^[0-9]+\.[0-9]+'; then
	echo "$v"
else
	echo "0.0.0~$v"
fi
