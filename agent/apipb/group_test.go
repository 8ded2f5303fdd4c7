package apipb

import (
	"os/user"
	"strconv"
	"testing"
)

// TestInGroup: a user belongs to its primary group and to every group the
// group database lists it in, and to no other.
func TestInGroup(t *testing.T) {
	u, err := user.Current()
	if err != nil {
		t.Skipf("no current user: %v", err)
	}
	ids, err := u.GroupIds()
	if err != nil {
		t.Skipf("group database unreadable: %v", err)
	}
	primary, _ := strconv.Atoi(u.Gid)
	if !InGroup(u, primary) {
		t.Errorf("%s not in its primary group %d", u.Username, primary)
	}
	member := map[int]bool{}
	for _, id := range ids {
		n, _ := strconv.Atoi(id)
		member[n] = true
		if !InGroup(u, n) {
			t.Errorf("%s not in group %d, which the group database lists it in", u.Username, n)
		}
	}
	outside := 1
	for member[outside] || outside == primary {
		outside++
	}
	if InGroup(u, outside) {
		t.Errorf("%s in group %d, which it does not belong to", u.Username, outside)
	}
	if InGroup(&user.User{Username: "vipd-no-such-user", Uid: "4294967294", Gid: "4294967294"}, primary) && primary != 4294967294 {
		t.Errorf("a user the system does not know is in group %d", primary)
	}
}
