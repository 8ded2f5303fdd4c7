# packages.mk — .deb and .rpm packages (included by the top-level Makefile).
#
#   make packages       static binaries + dist/vipd_*.deb and dist/vipd-*.rpm
#   make packages-arm64 the same for arm64 (PKG_ARCH=arm64; cross-compiled,
#                       CGO_ENABLED=0), beside the host's; package-test
#                       checks them and runs them under qemu-user
#   make package-test   (root, Debian) build, inspect, install, check, purge:
#                       packaging/test-packages.sh
#   make systemd-test   (root) the .deb under a real systemd: boots a cached
#                       Debian rootfs in systemd-nspawn and checks the unit
#                       step by step: packaging/systemd-test/systemd-test.sh
#
# nfpm is installed with `go install` into .tools/ (nothing else is downloaded).
# Variables: PKG_ARCH (GOARCH, default the host's; amd64 and arm64 are built
# and checked), PKG_RELEASE, PKG_MAINTAINER;
# PKG_VERSION is derived from VERSION (git describe) by packaging/pkg-version.sh
# in a form dpkg and rpm accept: v1.2.3 -> 1.2.3, abc123 -> 0.0.0~abc123.
# PKG_PREBUILT_BIN=DIR packages DIR/vipd and DIR/vipctl instead of building
# them (they must still be static and version-stamped; package-test checks).
# Man pages and completions come from `make man` (gzipped into the stage dir).

NFPM_VERSION   := v2.45.2
NFPM_DIR       := $(CURDIR)/.tools/nfpm-$(NFPM_VERSION)
NFPM           := $(NFPM_DIR)/nfpm

HOST_ARCH      := $(shell $(GO) env GOARCH)
PKG_ARCH       ?= $(HOST_ARCH)
PKG_RELEASE    ?= 1
PKG_MAINTAINER ?= vipd maintainers <vipd@example.org>
PKG_VERSION    ?= $(shell packaging/pkg-version.sh '$(VERSION)')
PKG_DIST       := $(CURDIR)/dist
PKG_BIN_DIR    := $(PKG_DIST)/build/linux_$(PKG_ARCH)
PKG_STAGE_DIR  := $(PKG_DIST)/stage
RPM_ARCH       := $(or $(filter-out amd64 arm64,$(PKG_ARCH)),$(if $(filter amd64,$(PKG_ARCH)),x86_64,aarch64))
PKG_DEB        := $(PKG_DIST)/vipd_$(PKG_VERSION)-$(PKG_RELEASE)_$(PKG_ARCH).deb
PKG_RPM        := $(PKG_DIST)/vipd-$(PKG_VERSION)-$(PKG_RELEASE).$(RPM_ARCH).rpm

.PHONY: packages packages-arm64 package-bins package-test systemd-test

$(NFPM):
	mkdir -p $(NFPM_DIR)
	printf '*\n' > $(CURDIR)/.tools/.gitignore
	GOBIN=$(NFPM_DIR) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

# package-bins: static (CGO_ENABLED=0), version-stamped linux binaries.
package-bins:
	mkdir -p $(PKG_BIN_DIR)
ifdef PKG_PREBUILT_BIN
	@echo "packaging prebuilt binaries from $(PKG_PREBUILT_BIN)"
	install -m 0755 $(PKG_PREBUILT_BIN)/vipd $(PKG_PREBUILT_BIN)/vipctl $(PKG_BIN_DIR)/
else
	CGO_ENABLED=0 GOOS=linux GOARCH=$(PKG_ARCH) $(GO) build $(GOFLAGS_BUILD) -o $(PKG_BIN_DIR)/vipd ./cmd/vipd
	CGO_ENABLED=0 GOOS=linux GOARCH=$(PKG_ARCH) $(GO) build $(GOFLAGS_BUILD) -o $(PKG_BIN_DIR)/vipctl ./cmd/vipctl
endif

packages: vipd.toml.example $(NFPM) package-bins man
	rm -rf $(PKG_STAGE_DIR) $(PKG_DEB) $(PKG_RPM)
	mkdir -p $(PKG_STAGE_DIR)/doc $(PKG_STAGE_DIR)/man
	cp docs/*.md $(PKG_STAGE_DIR)/doc/
	for f in $(GEN_DIR)/man/*; do gzip -n -9 -c "$$f" > $(PKG_STAGE_DIR)/man/$$(basename "$$f").gz; done
	if [ -f README.md ]; then cp README.md $(PKG_STAGE_DIR)/doc/; fi
	export PKG_ARCH='$(PKG_ARCH)' PKG_VERSION='$(PKG_VERSION)' PKG_RELEASE='$(PKG_RELEASE)' \
		PKG_MAINTAINER='$(PKG_MAINTAINER)' PKG_BIN_DIR='$(PKG_BIN_DIR)' PKG_STAGE_DIR='$(PKG_STAGE_DIR)' \
		PKG_GEN_DIR='$(CURDIR)/$(GEN_DIR)' && \
	$(NFPM) package --config packaging/nfpm.yaml --packager deb --target $(PKG_DEB) && \
	$(NFPM) package --config packaging/nfpm.yaml --packager rpm --target $(PKG_RPM)
	printf 'VERSION=%s\nPKG_VERSION=%s\nPKG_RELEASE=%s\nPKG_BIN_DIR=%s\nPKG_DEB=%s\nPKG_RPM=%s\n' \
		'$(VERSION)' '$(PKG_VERSION)' '$(PKG_RELEASE)' '$(PKG_BIN_DIR)' '$(PKG_DEB)' '$(PKG_RPM)' > $(PKG_DIST)/packages-$(PKG_ARCH).env
	if [ '$(PKG_ARCH)' = '$(HOST_ARCH)' ]; then cp $(PKG_DIST)/packages-$(PKG_ARCH).env $(PKG_DIST)/packages.env; fi
	@echo "packages: $(PKG_DEB) $(PKG_RPM)"

# packages-arm64: the arm64 .deb and .rpm (dist/packages-arm64.env names them).
packages-arm64:
	$(MAKE) --no-print-directory packages PKG_ARCH=arm64

package-test:
	packaging/test-packages.sh

systemd-test:
	packaging/systemd-test/systemd-test.sh
