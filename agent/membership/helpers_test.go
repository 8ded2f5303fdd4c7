package membership

import (
	"errors"
	"strings"
)

// testCodec reads test metadata: "ok:" and anything after it; a member
// whose metadata says "ok:leaving" is leaving.
var testCodec = Codec[string]{
	Decode: func(b []byte) (string, error) {
		if !strings.HasPrefix(string(b), "ok:") {
			return "", errors.New("not ok")
		}
		return string(b), nil
	},
	Leaving: func(m string) bool { return m == "ok:leaving" },
}
