package agent

import (
	"github.com/vipd/vipd/agent/membership"
)

// memberInfo is the membership table entry of one node, its metadata
// decoded (package membership holds the table).
type memberInfo = membership.Member[NodeMeta]

// metaCodec reads the members' metadata for package membership.
var metaCodec = membership.Codec[NodeMeta]{
	Decode:  DecodeMeta,
	Leaving: func(m NodeMeta) bool { return m.Leaving },
}
