package bgp

import (
	"testing"

	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// FuzzDecodeMessage runs GoBGP's decoding of a received message the way
// the speaker's sessions do (GoBGP's fsm: ParseBGPMessage, then for an
// UPDATE ValidateUpdateMsg with the session's families, IPv4 and IPv6
// unicast without add-path, on an eBGP
// session outside a confederation; for an OPEN ValidateOpenMsg with the
// peer's and vipd's AS). Any panic is a crash of vipd. The seeds are the
// advisory shapes and the valid messages TestPeerFuzz sends (make fuzz).
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range advisoryShapes(fuzzASN) {
		f.Add(s.msg)
	}
	for _, u := range validUpdates(fuzzASN) {
		f.Add(u)
	}
	f.Add(openMsg(fuzzASN, 9, fuzzPeerAddr, validCaps(fuzzASN)...))
	families := map[bgp.Family]bgp.BGPAddPathMode{
		bgp.RF_IPv4_UC: bgp.BGP_ADD_PATH_NONE,
		bgp.RF_IPv6_UC: bgp.BGP_ADD_PATH_NONE,
	}
	routerID := speakerV4
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := bgp.ParseBGPMessage(b, &bgp.MarshallingOption{AddPath: families})
		if err != nil {
			// vipd does not turn on GoBGP's revised error handling
			// (RFC 7606): a decoding error resets the session.
			return
		}
		switch body := m.Body.(type) {
		case *bgp.BGPUpdate:
			bgp.ValidateUpdateMsg(body, families, true, false, false)
			for _, a := range body.PathAttributes {
				_ = a.String() // GoBGP logs what it rejects
			}
		case *bgp.BGPOpen:
			bgp.ValidateOpenMsg(body, fuzzASN, speakerASN, routerID)
		}
	})
}
