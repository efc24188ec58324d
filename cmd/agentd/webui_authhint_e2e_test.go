package main

import (
	"testing"
)

// A provider's 401 reaches the person at the web UI with the hint that
// names the key variable (the mock provider's apiKey is MOCK_API_KEY),
// as it does on rpc, serve's pi-server, REST and ACP.
func TestWebUI401NamesTheKey(t *testing.T) {
	browser := wuBrowser(t)
	e := e2eNewEnv(t, e2eOpts{})
	s := svStartInProc(t, e)
	p, con := wuOpenAt(t, browser, s, 0, 0)
	p.newConversation("refused key")
	p.send("FAIL:401 please")
	// The failed answer shows its errorMessage, the hint included.
	p.until("the error, naming the key", shows("401 mock failure 401 (mock refused the API key: check MOCK_API_KEY)"))
	p.until("idle", stateIs("idle"))
	p.shot("refused-key")
	// The step whose model failed at once answers 500 with the error (as
	// gptme's does), which the browser logs; nothing else may be logged.
	con.clean(p, "status of 500 (Internal Server Error) (http://"+s.loopback()+"/api/v2/conversations/"+p.convID()+"/step)")
}
