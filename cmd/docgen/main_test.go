package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vipd/vipd/agent/config"
	"github.com/vipd/vipd/cmd/vipctl/cli"
)

func gen(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	if err := generate(options{src: "../../docs/man", out: out, version: "1.2.3", date: "2026-05-04"}); err != nil {
		t.Fatal(err)
	}
	return out
}

// roffText is a page's text without font changes and escapes, enough to
// find "--check" or "cluster.key_file" in it.
func roffText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer(`\fB`, "", `\fI`, "", `\fP`, "", `\fR`, "", `\-`, "-", `\&`, "", `\e`, `\`).Replace(string(b))
}

// TestVipdPageCoversFlags: every flag `vipd --help` lists, and the cleanup
// command, is in vipd(8).
func TestVipdPageCoversFlags(t *testing.T) {
	page := roffText(t, filepath.Join(gen(t), "man", "vipd.8"))
	bin := filepath.Join(t.TempDir(), "vipd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/vipd/vipd/cmd/vipd").CombinedOutput(); err != nil {
		t.Fatalf("go build vipd: %v %s", err, out)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput() // flag's -help exits 0 or 2 by version
	flags := regexp.MustCompile(`(?m)^\s+--?([a-z][a-z0-9-]*)`).FindAllStringSubmatch(string(help), -1)
	if len(flags) < 3 {
		t.Fatalf("found %d flags in vipd --help; its format changed?\n%s", len(flags), help)
	}
	for _, f := range flags {
		if !documents(page, f[1]) {
			t.Errorf("vipd(8) does not document --%s", f[1])
		}
	}
	if !strings.Contains(string(help), "vipd cleanup") || !regexp.MustCompile(`(?m)^\.TP\ncleanup$`).MatchString(page) {
		t.Errorf("vipd(8) does not document the cleanup command")
	}
}

// TestVipctlPageCoversCommands: every vipctl command and each of its
// flags is in vipctl(8), under the command's own subsection.
func TestVipctlPageCoversCommands(t *testing.T) {
	page := roffText(t, filepath.Join(gen(t), "man", "vipctl.8"))
	root := cli.Command("test")
	root.InitDefaultHelpFlag()
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !documents(page, f.Name) {
			t.Errorf("vipctl(8) does not document --%s", f.Name)
		}
	})
	for _, flag := range []string{"help", "version"} {
		if !documents(page, flag) {
			t.Errorf("vipctl(8) does not document --%s", flag)
		}
	}
	n := 0
	for _, c := range root.Commands() {
		if c.Hidden {
			continue
		}
		n++
		sec := subsection(page, "vipctl "+c.Name())
		if sec == "" {
			t.Errorf("vipctl(8) has no subsection for vipctl %s", c.Name())
			continue
		}
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if !documents(sec, f.Name) {
				t.Errorf("vipctl(8) does not document vipctl %s --%s", c.Name(), f.Name)
			}
		})
	}
	if n < 6 {
		t.Errorf("only %d commands in vipctl's tree", n)
	}
}

// documents reports whether text has a definition (.TP) of --flag: the
// flag explained, not only mentioned.
func documents(text, flag string) bool {
	return regexp.MustCompile(`(?m)^\.TP\n(-[a-z], )?--` + regexp.QuoteMeta(flag) + `( |,|$)`).MatchString(text)
}

// subsection is the text of the .SS whose title starts with title.
func subsection(page, title string) string {
	i := strings.Index(page, "\n.SS "+title)
	if i < 0 {
		return ""
	}
	rest := page[i+1:]
	if j := strings.IndexAny(rest[4:], "\n"); j >= 0 {
		if k := strings.Index(rest[4+j:], "\n.S"); k >= 0 {
			return rest[:4+j+k]
		}
	}
	return rest
}

// TestConfigPageCoversKeys: every key of the configuration
// (config.Keys) is in vipd.toml(5).
func TestConfigPageCoversKeys(t *testing.T) {
	page := roffText(t, filepath.Join(gen(t), "man", "vipd.toml.5"))
	keys := config.Keys()
	if len(keys) < 30 {
		t.Fatalf("found only %d keys; reflection broke", len(keys))
	}
	for _, k := range keys {
		if !regexp.MustCompile(`(?m)^\.TP\n` + regexp.QuoteMeta(k) + `$`).MatchString(page) {
			t.Errorf("vipd.toml(5) does not document %s", k)
		}
	}
}

// TestPagesRender: man renders every page without a warning, and the NAME
// line parses for whatis/apropos (lexgrog).
func TestPagesRender(t *testing.T) {
	out := gen(t)
	if _, err := exec.LookPath("man"); err != nil {
		t.Skip("man not installed")
	}
	for _, p := range pages() {
		path := filepath.Join(out, "man", p.out)
		cmd := exec.Command("man", "--warnings", "-l", path)
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "MANPAGER=cat", "PAGER=cat")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		text, err := cmd.Output()
		if err != nil || stderr.Len() > 0 {
			t.Errorf("man -l %s: %v: %s", p.out, err, stderr.String())
		}
		name := strings.SplitN(p.out, ".", 2)[0]
		if p.out == "vipd.toml.5" {
			name = "vipd.toml"
		}
		if !regexp.MustCompile(`NAME\n\s+` + regexp.QuoteMeta(name) + `\s+-\s`).Match(text) {
			t.Errorf("%s: no NAME line for %s:\n%.300s", p.out, name, text)
		}
		if lg, err := exec.LookPath("lexgrog"); err == nil {
			if b, err := exec.Command(lg, path).CombinedOutput(); err != nil || !strings.Contains(string(b), `"`+name+" - ") {
				t.Errorf("lexgrog %s: %v %s", p.out, err, b)
			}
		}
	}
}

// TestCompletionFiles: the generated scripts are vipctl's, and bash parses
// its own.
func TestCompletionFiles(t *testing.T) {
	out := gen(t)
	for name, want := range map[string]string{"vipctl.bash": "complete -o default -F __start_vipctl vipctl",
		"_vipctl": "#compdef vipctl", "vipctl.fish": "complete -c vipctl"} {
		b, err := os.ReadFile(filepath.Join(out, "completion", name))
		if err != nil || !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s: %v, want it to contain %q", name, err, want)
		}
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		if b, err := exec.Command(bash, "-n", filepath.Join(out, "completion", "vipctl.bash")).CombinedOutput(); err != nil {
			t.Errorf("bash -n: %v %s", err, b)
		}
	}
}

// TestReproducible: the same sources, version and date give the same
// bytes (packages are reproducible).
func TestReproducible(t *testing.T) {
	a, b := gen(t), gen(t)
	for _, p := range pages() {
		x, _ := os.ReadFile(filepath.Join(a, "man", p.out))
		y, _ := os.ReadFile(filepath.Join(b, "man", p.out))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs", p.out)
		}
	}
	if d, _ := defaultDate("1777896000", time.Now()); d != "2026-05-04" {
		t.Errorf("SOURCE_DATE_EPOCH 1777896000 gave %s", d)
	}
	if _, err := defaultDate("soon", time.Now()); err == nil {
		t.Errorf("bad SOURCE_DATE_EPOCH accepted")
	}
}

// TestUnknownDirective: a typo in a page's {{directive}} fails the build
// instead of shipping "{{optoins}}".
func TestUnknownDirective(t *testing.T) {
	if _, err := expand([]byte("x {{optoins}} y"), options{}, &cobra.Command{Use: "vipctl"}); err == nil {
		t.Error("unknown directive accepted")
	}
}
