//go:build !agentd_no_embedded_nats

package cli

import (
	"log/slog"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/cluster/embeddednats"
	"github.com/agentd-dev/agentd/internal/config"
)

// embeddedClusterName names the NATS cluster the embedded servers of
// --cluster-route-listen form; the same on every node.
const embeddedClusterName = "agentd"

// startEmbeddedNATS runs the NATS server of --cluster embedded in this
// process, admitting only the holders of the cluster key. It makes the
// binary about 16 MB larger (87 MB without it); build with -tags
// agentd_no_embedded_nats to leave it out, and join an external NATS
// with --cluster nats://… instead.
func startEmbeddedNATS(storeDir string, cc config.Cluster, key *cluster.Key, log *slog.Logger) (*embeddedNATS, error) {
	ecfg := embeddednats.Config{StoreDir: storeDir, Listen: cc.Listen, ServerName: cc.NodeID, Logger: log,
		Nkey: key.PublicKey(), TLSCert: cc.TLSCert, TLSKey: cc.TLSKey}
	if cc.RouteListen != "" {
		// The nodes' embedded servers form one NATS cluster: routes
		// admit only the holders of the cluster key (its route secret).
		ecfg.ClusterName, ecfg.ClusterListen, ecfg.Routes = embeddedClusterName, cc.RouteListen, cc.Routes
		ecfg.RouteSecret, ecfg.TLSCA = key.RouteSecret(), cc.TLSCA
	}
	ns, err := embeddednats.Start(ecfg)
	if err != nil {
		return nil, err
	}
	return &embeddedNATS{url: ns.ClientURL(), inProcessURL: ns.InProcessURL(), inProcess: ns, stop: ns.Shutdown, routes: ns.ClusterAddr()}, nil
}
