package commands

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSubstitute(t *testing.T) {
	for _, tc := range []struct {
		name, body, args, want string
	}{
		{"positional", "Review $1 for $2.", "src/x.go bugs", "Review src/x.go for bugs."},
		{"missing positional is empty", "a=$1 b=$2", "only", "a=only b="},
		{"all as $@", "Files: $@", "a b c", "Files: a b c"},
		{"all as $ARGUMENTS", "Do: $ARGUMENTS.", "x y", "Do: x y."},
		{"quoted argument keeps spaces", "[$1] [$2]", `"two words" 'and more'`, "[two words] [and more]"},
		{"slice from", "${@:2}", "a b c d", "b c d"},
		{"slice from with length", "${@:2:2}", "a b c d", "b c"},
		{"slice past the end", "${@:9}", "a b", ""},
		{"no re-substitution of argument text", "$1 $2", "$2 x", "$2 x"},
		{"no arguments", "plain $@ text", "", "plain  text"},
		{"double digit", "$10", "1 2 3 4 5 6 7 8 9 ten", "ten"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Substitute(tc.body, SplitArgs(tc.args)); got != tc.want {
				t.Fatalf("Substitute(%q, %q) = %q, want %q", tc.body, tc.args, got, tc.want)
			}
		})
	}
}

func TestSplitArgs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"a  b\tc", []string{"a", "b", "c"}},
		{`"a b" c`, []string{"a b", "c"}},
		{`'' x`, []string{"", "x"}},
		{`it's`, []string{"its"}},
	} {
		if got := SplitArgs(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("SplitArgs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSkillValidation(t *testing.T) {
	for _, tc := range []struct {
		name, dir, text string
		loaded          bool
		warn            string // a warning that must be given, "" for none
	}{
		{"valid", "pdf-tools", "---\nname: pdf-tools\ndescription: Work with PDFs.\n---\nBody", true, ""},
		{"name from directory", "pdf-tools", "---\ndescription: Work with PDFs.\n---\nBody", true, ""},
		{"name differs from directory", "pdf", "---\nname: pdf-tools\ndescription: d\n---\n", true, "does not match parent directory"},
		{"uppercase", "PDF", "---\nname: PDF\ndescription: d\n---\n", true, "invalid characters"},
		{"leading hyphen", "-pdf", "---\nname: -pdf\ndescription: d\n---\n", true, "start or end with a hyphen"},
		{"double hyphen", "a--b", "---\nname: a--b\ndescription: d\n---\n", true, "consecutive hyphens"},
		{"long name", strings.Repeat("a", 65), "---\ndescription: d\n---\n", true, "exceeds 64 characters"},
		{"long description", "x", "---\ndescription: " + strings.Repeat("d", 1025) + "\n---\n", true, "description exceeds 1024"},
		{"unknown field", "x", "---\ndescription: d\nauthor: me\n---\n", true, `unknown frontmatter field "author"`},
		{"no description", "x", "---\nname: x\n---\nBody", false, "description is required"},
		{"no frontmatter", "x", "Just text", false, "description is required"},
		{"bad yaml", "x", "---\ndescription: [unclosed\n---\n", false, "not valid YAML"},
		{"folded description", "x", "---\ndescription: >\n  Two\n  lines.\n---\n", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, filepath.Join(root, tc.dir, "SKILL.md"), tc.text)
			var warns []Warning
			got := skillsIn(root, LocationUser, true, func(w Warning) { warns = append(warns, w) })
			if (len(got) == 1) != tc.loaded {
				t.Fatalf("loaded %v, want %v (warnings %v)", got, tc.loaded, warns)
			}
			if tc.warn == "" && len(warns) > 0 {
				t.Fatalf("unexpected warnings %v", warns)
			}
			if tc.warn != "" && !slices.ContainsFunc(warns, func(w Warning) bool { return strings.Contains(w.Message, tc.warn) }) {
				t.Fatalf("warnings %v, want one saying %q", warns, tc.warn)
			}
		})
	}
}

// TestLoad covers where skills and templates are found, what wins a name
// collision, the prompt section, expansion and the listing.
func TestLoad(t *testing.T) {
	base := t.TempDir()
	global := filepath.Join(base, "config")
	pi := filepath.Join(base, "pi")
	agents := filepath.Join(base, "home", ".agents", "skills")
	repo := filepath.Join(base, "repo")
	cwd := filepath.Join(repo, "sub")
	write(t, filepath.Join(repo, ".git", "HEAD"), "ref")
	write(t, filepath.Join(base, ".agents", "skills", "above", "SKILL.md"), "---\ndescription: above the repo\n---\n")
	write(t, filepath.Join(global, "skills", "deploy", "SKILL.md"), "---\nname: deploy\ndescription: Deploy <things> & \"stuff\".\n---\n# Deploy\nRun ./deploy.sh\n")
	write(t, filepath.Join(global, "skills", "deploy", "deploy.sh"), "echo")
	write(t, filepath.Join(pi, "skills", "deploy", "SKILL.md"), "---\ndescription: a second deploy\n---\n")
	write(t, filepath.Join(agents, "shared", "SKILL.md"), "---\ndescription: shared skill\n---\n")
	write(t, filepath.Join(repo, ".agents", "skills", "repo-skill", "SKILL.md"), "---\ndescription: from the repo root\ndisable-model-invocation: true\n---\nSecret body")
	write(t, filepath.Join(cwd, ".pi", "skills", "nested", "deeper", "SKILL.md"), "---\ndescription: deep\n---\n")
	// Under a skill's directory nothing more is a skill; a Markdown file
	// directly in .agents/skills is not one either.
	write(t, filepath.Join(cwd, ".pi", "skills", "nested", "deeper", "inner", "SKILL.md"), "---\ndescription: inner\n---\n")
	write(t, filepath.Join(repo, ".agents", "skills", "loose.md"), "---\ndescription: loose\n---\n")
	write(t, filepath.Join(global, "prompts", "review.md"), "---\ndescription: Review a file\nargument-hint: <file>\n---\nReview $1 carefully.\n")
	write(t, filepath.Join(cwd, ".pi", "prompts", "review.md"), "Project review $1")
	write(t, filepath.Join(cwd, ".agentd", "prompts", "plan.md"), "\n\nMake a plan for $@ and think about it thoroughly before writing anything down.\n")
	write(t, filepath.Join(cwd, ".agentd", "prompts", "help.md"), "shadows a builtin")

	reg := NewRegistry(Defaults(nil)...)
	cat := Load(Config{GlobalDirs: []string{global, pi}, UserSkillDirs: []string{agents}, ProjectDirs: []string{".agentd", ".pi"},
		ProjectSkillDirs: []string{filepath.Join(".agents", "skills")}}, cwd, reg)

	var names []string
	for _, s := range cat.Skills() {
		names = append(names, s.Name+"@"+s.Location)
	}
	if want := []string{"deeper@project", "repo-skill@project", "deploy@user", "shared@user"}; !slices.Equal(names, want) {
		t.Fatalf("skills %v, want %v (warnings %v)", names, want, cat.Warnings())
	}
	var tnames []string
	for _, tp := range cat.Templates() {
		tnames = append(tnames, tp.Name+"@"+tp.Location+":"+tp.Description)
	}
	if want := []string{"plan@project:Make a plan for $@ and think about it thoroughly before writ...", "review@project:Project review $1"}; !slices.Equal(tnames, want) {
		t.Fatalf("templates %q, want %q", tnames, want)
	}
	warned := func(s string) bool {
		return slices.ContainsFunc(cat.Warnings(), func(w Warning) bool { return strings.Contains(w.Message, s) })
	}
	if !warned(`skill name "deploy" is taken`) || !warned(`template name "review" is taken`) || !warned("/help is a built-in") {
		t.Fatalf("warnings %v", cat.Warnings())
	}

	sec := cat.PromptSection()
	if !strings.Contains(sec, "<available_skills>") || !strings.Contains(sec, "<name>deploy</name>") ||
		!strings.Contains(sec, "<description>Deploy &lt;things&gt; &amp; &quot;stuff&quot;.</description>") ||
		!strings.Contains(sec, "<location>"+filepath.Join(global, "skills", "deploy", "SKILL.md")+"</location>") {
		t.Fatalf("prompt section:\n%s", sec)
	}
	if strings.Contains(sec, "repo-skill") {
		t.Fatalf("a skill with disable-model-invocation is in the prompt:\n%s", sec)
	}

	for _, tc := range []struct{ in, want string }{
		{"/review src/x.go", "Project review src/x.go"},
		{"/plan a b", "Make a plan for a b and think about it thoroughly before writing anything down."},
		{"/skill:repo-skill go now", "<skill name=\"repo-skill\" location=\"" + filepath.Join(repo, ".agents", "skills", "repo-skill", "SKILL.md") +
			"\">\nReferences are relative to " + filepath.Join(repo, ".agents", "skills", "repo-skill") + ".\n\nSecret body\n</skill>\n\ngo now"},
		{"/unknown x", "/unknown x"},
		{"/skill:nope", "/skill:nope"},
		{"no slash", "no slash"},
	} {
		got, _, err := cat.Expand(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}

	list := cat.List()
	find := func(name string) (Command, bool) {
		i := slices.IndexFunc(list, func(c Command) bool { return c.Name == name })
		if i < 0 {
			return Command{}, false
		}
		return list[i], true
	}
	for _, tc := range []struct{ name, source, location string }{
		{"help", SourceBuiltin, ""}, {"compact", SourceBuiltin, ""}, {"model", SourceBuiltin, ""}, {"fork", SourceBuiltin, ""},
		{"review", SourcePrompt, LocationProject}, {"plan", SourcePrompt, LocationProject},
		{"skill:deploy", SourceSkill, LocationUser}, {"skill:repo-skill", SourceSkill, LocationProject},
	} {
		c, ok := find(tc.name)
		if !ok || c.Source != tc.source || c.Location != tc.location {
			t.Errorf("listing has %+v for %s, want source %s location %s", c, tc.name, tc.source, tc.location)
		}
	}

	out, ok, err := cat.Run(context.Background(), nil, "/help")
	if !ok || err != nil || !strings.Contains(out, "/review: Project review $1 (template, project)") || !strings.Contains(out, "/skill:deploy") {
		t.Fatalf("/help = %q, %v, %v", out, ok, err)
	}
	if _, ok, _ := cat.Run(context.Background(), nil, "/review x"); ok {
		t.Fatal("a template ran as a built-in")
	}
}

// TestReadGrants: a skill grants its own directory; a Markdown file
// directly in a skills directory grants only itself; a project's skill
// reached through a link out of the project grants nothing.
func TestReadGrants(t *testing.T) {
	base := t.TempDir()
	global := filepath.Join(base, "config")
	secret := filepath.Join(base, "secret")
	cwd := filepath.Join(base, "proj")
	write(t, filepath.Join(cwd, ".git", "HEAD"), "x")
	write(t, filepath.Join(global, "skills", "deploy", "SKILL.md"), "---\ndescription: d\n---\n")
	write(t, filepath.Join(global, "skills", "loose.md"), "---\ndescription: loose\n---\n")
	write(t, filepath.Join(secret, "stolen", "SKILL.md"), "---\ndescription: s\n---\n")
	write(t, filepath.Join(secret, "stolen", "key.pem"), "KEY")
	if err := os.MkdirAll(filepath.Join(cwd, ".pi", "skills"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(secret, "stolen"), filepath.Join(cwd, ".pi", "skills", "stolen")); err != nil {
		t.Fatal(err)
	}
	cat := Load(Config{GlobalDirs: []string{global}, ProjectDirs: []string{".pi"}}, cwd, nil)
	if len(cat.Skills()) != 3 {
		t.Fatalf("skills %+v warnings %v", cat.Skills(), cat.Warnings())
	}
	want := []string{filepath.Join(global, "skills", "deploy"), filepath.Join(global, "skills", "loose.md")}
	if got := cat.ReadGrants(); !slices.Equal(got, want) {
		t.Fatalf("grants %q, want %q", got, want)
	}
}

func FuzzSplitFrontmatter(f *testing.F) {
	f.Add("---\nname: x\ndescription: y\n---\nbody")
	f.Add("---\n---")
	f.Add("---\nkey: [\n---\n")
	f.Add("no frontmatter")
	f.Fuzz(func(t *testing.T, s string) {
		fields, body, err := splitFrontmatter(s)
		if err == nil && fields == nil && body == "" && s != "" && !strings.HasPrefix(s, "---") && s != "\ufeff" {
			t.Fatalf("lost the body of %q", s)
		}
		_ = Substitute(body, SplitArgs(s))
	})
}
