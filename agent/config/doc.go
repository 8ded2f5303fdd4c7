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
// Rules that belong to a backend are the backend's: a [bgp] section is
// converted into the bgp.Config the daemon's speaker is built from
// (Config.Speaker) and checked with bgp.Config.Validate, and a VIP's
// interface with l2.Config.Validate (VIPConfig.L2), so a file `vipd --check` accepts is
// one the daemon starts with. What only a running host can tell (an
// interface that does not exist, a secret file the service user cannot
// read, a VIP that is one of the host's addresses) is CheckHost's, which
// agent.Preflight runs for the start and for `vipd --check` alike. Its
// ConfigError lists at most MaxProblems problems.
//
// ReadLenient is the other way in, for `vipd cleanup`: it reads only the
// VIPs' addresses and interfaces, and works with a file that does not even
// parse.
package config
