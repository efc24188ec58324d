package pirpc

import "github.com/agentd-dev/agentd/internal/piwire"

// modeCommand runs agentd's mode commands: get_modes answers the
// session's mode and the modes there are; set_mode {"mode": "plan"}
// switches (see session.SetMode) and answers the same.
func (srv *Server) modeCommand(id *rawID, typ, mode string) {
	if typ == "set_mode" {
		if mode == "" {
			srv.reply(failure(id, typ, `set_mode requires a "mode" string`))
			return
		}
		if err := srv.s.SetMode(mode); err != nil {
			srv.fail(id, typ, err)
			return
		}
	}
	srv.reply(success(id, typ, piwire.ModesOf(srv.s)))
}
