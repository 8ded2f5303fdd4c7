// Package config reads vipd's configuration file: TOML, every key
// documented in vipd.toml.example and docs/configuration.md.
//
// Load and Parse are the one way in, for the daemon at start and on
// SIGHUP and for `vipd --check` alike: the file is decoded, its defaults
// applied (the Default constants say which are whose), and every value
// checked. A problem is reported at the file, line and column of the key
// it is about (a Problem; all of them in a *ConfigError), never by the
// TOML library's wording alone.
//
// Rules that belong to a backend are the backend's, and the package imports
// no backend: the daemon and `vipd --check` load the file with the
// backends' rules (BackendRules, which cmd/vipd takes from package
// backendconfig), and Parse places what they find at the key it is about.
// A [bgp] section is read into the typed BGPSpeaker the daemon's speaker is
// built from (Config.Speaker) and checked with the bgp package's
// Config.Validate; l2.refresh_interval with the l2 package's rule; a VIP's
// interface with the kernel's rule for names (package ifname, the one the
// l2 announcers check), so a file `vipd --check` accepts is one the daemon
// starts with. What only a running host can tell (an
// interface that does not exist, a secret file the service user cannot
// read, a VIP that is one of the host's addresses) is CheckHost's, which
// agent.Preflight runs for the start and for `vipd --check` alike. Its
// ConfigError lists at most MaxProblems problems.
//
// ReadLenient is the other way in, for `vipd cleanup`: it reads only the
// VIPs' addresses and interfaces, and works with a file that does not even
// parse.
package config
