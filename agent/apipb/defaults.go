package apipb

// Defaults shared by vipd and vipctl. They live here, beside the API they
// describe, so vipctl links no daemon code.
const (
	// DefaultSocket is the unix socket vipd serves the API on.
	DefaultSocket = "/run/vipd/vipd.sock"
	// DefaultSocketGroup owns the socket when api.socket_group is unset and
	// the group exists; its members may use vipctl.
	DefaultSocketGroup = "vipd"
)
