package apipb

import (
	"os/user"
	"slices"
	"strconv"
)

// InGroup reports whether user u belongs to group gid: as its primary
// group, or as a supplementary group the group database lists it in. Who
// may use the API socket is decided by it: vipd authorizes a caller that
// is not root with it, and vipctl explains a refusal with it.
func InGroup(u *user.User, gid int) bool {
	id := strconv.Itoa(gid)
	if u.Gid == id {
		return true
	}
	ids, err := u.GroupIds()
	return err == nil && slices.Contains(ids, id)
}
