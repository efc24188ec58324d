package tool

import (
	"encoding/json"
	"fmt"

	"github.com/agentd-dev/agentd/internal/llm"
)

// The schemas are written out by hand rather than generated: they are part
// of every request's prompt prefix, so they must be byte-stable, and their
// parameter names and types must be exactly pi's so transcripts and
// models trained on pi's tools carry over. Descriptions are agentd's own.
// Each is built when a session asks for it, not at start: a command that
// runs no tools pays nothing for them.

func readSpec() llm.Tool {
	return llm.Tool{
		Name: "read",
		Description: fmt.Sprintf("Read a file. Text files come back as text; images (png, jpeg, gif, webp) come back as image attachments. "+
			"Text output stops after %d lines or %dKB, whichever comes first, and then says which offset to continue from: "+
			"read large files piece by piece with offset and limit until you have what you need.", MaxLines, MaxBytes/1024),
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"File to read, relative to the working directory or absolute"},` +
			`"offset":{"type":"number","description":"First line to return, counting from 1"},` +
			`"limit":{"type":"number","description":"Largest number of lines to return"}` +
			`},"required":["path"]}`),
	}
}

func writeSpec() llm.Tool {
	return llm.Tool{
		Name: "write",
		Description: "Write a file with the given content, replacing it entirely if it exists and creating it (and any missing parent " +
			"directories) if it does not. Prefer edit for changing part of an existing file.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"File to write, relative to the working directory or absolute"},` +
			`"content":{"type":"string","description":"The complete new content of the file"}` +
			`},"required":["path","content"]}`),
	}
}

func editSpec() llm.Tool {
	return llm.Tool{
		Name: "edit",
		Description: "Change one file by exact text replacement. Each edits[].oldText must occur exactly once in the file as it is now, " +
			"and no two edits may overlap: all of them are located in the original file before any is applied. " +
			"When two changes are close together, make them one edit; keep each oldText short but unique, without long unchanged stretches.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"File to edit, relative to the working directory or absolute"},` +
			`"edits":{"type":"array","description":"The replacements to make, each matched against the original file (not against the result of earlier edits). They must not overlap or nest; merge neighbouring changes into one edit.",` +
			`"items":{"type":"object","properties":{` +
			`"oldText":{"type":"string","description":"Text to replace, copied exactly (whitespace and line breaks included); it must be unique in the file and must not overlap any other edit's oldText"},` +
			`"newText":{"type":"string","description":"Text to put in its place"}` +
			`},"required":["oldText","newText"],"additionalProperties":false}}` +
			`},"required":["path","edits"],"additionalProperties":false}`),
	}
}

func bashSpec() llm.Tool {
	return llm.Tool{
		Name: "bash",
		Description: fmt.Sprintf("Run a shell command in the working directory and return what it printed (stdout and stderr together). "+
			"Only the last %d lines or %dKB of output are returned, whichever is smaller; when output is cut, the full output is saved "+
			"to a file whose path is given. A timeout in seconds may be set. Processes the command starts end with it unless background is set; "+
			"the command is stopped if it uses too many processes, too much memory or too much CPU time.", MaxLines, MaxBytes/1024),
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"command":{"type":"string","description":"The command line to run"},` +
			`"timeout":{"type":"number","description":"Seconds after which the command is killed (optional; by default there is no timeout)"},` +
			`"background":{"type":"boolean","description":"Keep processes the command leaves running in the background (such as a server started with &) alive after it returns, until the session ends (optional; by default everything the command started is killed when it returns)"}` +
			`},"required":["command"]}`),
	}
}

func grepSpec() llm.Tool {
	return llm.Tool{
		Name: "grep",
		Description: fmt.Sprintf("Search the contents of files for a regular expression (or a literal string) and return matching lines "+
			"with their file and line number. Files ignored by .gitignore are skipped. At most %d matches (by default) and %dKB are "+
			"returned; lines longer than %d characters are shortened.", defaultGrepLimit, MaxBytes/1024, MaxGrepLineChars),
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"pattern":{"type":"string","description":"Regular expression to search for, or a plain string when literal is true"},` +
			`"path":{"type":"string","description":"Directory or file to search (defaults to the working directory)"},` +
			`"glob":{"type":"string","description":"Only search files matching this glob, such as '*.go' or 'src/**/*_test.go'"},` +
			`"ignoreCase":{"type":"boolean","description":"Match regardless of case (default false)"},` +
			`"literal":{"type":"boolean","description":"Search for pattern as plain text rather than a regular expression (default false)"},` +
			`"context":{"type":"number","description":"Lines of context to show before and after each match (default 0)"},` +
			fmt.Sprintf(`"limit":{"type":"number","description":"Largest number of matches to return (default %d)"}`, defaultGrepLimit) +
			`},"required":["pattern"]}`),
	}
}

func findSpec() llm.Tool {
	return llm.Tool{
		Name: "find",
		Description: fmt.Sprintf("Find files and directories whose names match a glob pattern. Paths are returned relative to the "+
			"directory searched, directories with a trailing '/'. Files ignored by .gitignore are skipped. At most %d results (by "+
			"default) and %dKB are returned.", defaultFindLimit, MaxBytes/1024),
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"pattern":{"type":"string","description":"Glob to match, such as '*.go', '**/*.json' or 'src/**/*_test.go'"},` +
			`"path":{"type":"string","description":"Directory to search (defaults to the working directory)"},` +
			fmt.Sprintf(`"limit":{"type":"number","description":"Largest number of results to return (default %d)"}`, defaultFindLimit) +
			`},"required":["pattern"]}`),
	}
}

func lsSpec() llm.Tool {
	return llm.Tool{
		Name: "ls",
		Description: fmt.Sprintf("List a directory: entries in alphabetical order, dotfiles included, directories marked with a trailing '/'. "+
			"At most %d entries (by default) and %dKB are returned.", defaultLsLimit, MaxBytes/1024),
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"Directory to list (defaults to the working directory)"},` +
			fmt.Sprintf(`"limit":{"type":"number","description":"Largest number of entries to return (default %d)"}`, defaultLsLimit) +
			`}}`),
	}
}
