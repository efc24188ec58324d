package cli

import (
	"net"
	"testing"

	"github.com/agentd-dev/agentd/internal/config"
)

// The startup log names a URL this machine can open and what clients
// must present to connect.
func TestStartupLogFields(t *testing.T) {
	for _, tt := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3141}, "127.0.0.1:3141"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 3141}, "127.0.0.1:3141"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 80}, "127.0.0.1:80"},
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 8080}, "10.1.2.3:8080"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 3141}, "[::1]:3141"},
	} {
		if got := reachable(tt.addr); got != tt.want {
			t.Errorf("reachable(%s) = %s, want %s", tt.addr, got, tt.want)
		}
	}
	for _, tt := range []struct {
		sc   config.Serve
		want string
	}{
		{config.Serve{}, "none"},
		{config.Serve{Token: "t"}, "token"},
		{config.Serve{JWTKeys: "k.pem"}, "jwt"},
		{config.Serve{Token: "t", JWTSecretFile: "s", AuthCommand: "x"}, "token+jwt+command"},
	} {
		if got := authOf(tt.sc); got != tt.want {
			t.Errorf("authOf(%+v) = %s, want %s", tt.sc, got, tt.want)
		}
	}
}
