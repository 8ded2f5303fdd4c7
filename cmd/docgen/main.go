// Command docgen writes vipd's man pages and vipctl's shell completions at
// build time (make man), from one source each:
//
//   - vipd(8) and vipd.toml(5) from markdown in docs/man; vipd.toml(5)
//     includes the key tables of docs/configuration.md.
//   - vipctl(8) from docs/man/vipctl.8.md, with its OPTIONS and COMMANDS
//     written from vipctl's command tree (the flags vipctl really has).
//   - the bash, zsh and fish completions from the same command tree.
//
// The markdown is converted to roff with go-md2man. Output:
// OUT/man/{vipd.8,vipctl.8,vipd.toml.5} and
// OUT/completion/{vipctl.bash,_vipctl,vipctl.fish}.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cpuguy83/go-md2man/v2/md2man"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vipd/vipd/cmd/vipctl/cli"
)

func main() {
	var o options
	flag.StringVar(&o.src, "src", "docs/man", "directory of the markdown sources")
	flag.StringVar(&o.out, "out", "dist/gen", "output directory (man/ and completion/ below it)")
	flag.StringVar(&o.version, "version", "dev", "version printed in the pages' footer")
	flag.StringVar(&o.date, "date", "", "date printed in the pages' footer, YYYY-MM-DD (default: SOURCE_DATE_EPOCH, else today)")
	flag.Parse()
	if o.date == "" {
		d, err := defaultDate(os.Getenv("SOURCE_DATE_EPOCH"), time.Now())
		if err != nil {
			fmt.Fprintln(os.Stderr, "docgen:", err)
			os.Exit(2)
		}
		o.date = d
	}
	if err := generate(o); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

type options struct {
	src, out, version, date string
}

func defaultDate(epoch string, now time.Time) (string, error) {
	if epoch == "" {
		return now.UTC().Format("2006-01-02"), nil
	}
	n, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return "", fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	return time.Unix(n, 0).UTC().Format("2006-01-02"), nil
}

// page is a man page: its markdown source and output name.
type page struct{ src, out string }

func pages() []page {
	return []page{{"vipd.8.md", "vipd.8"}, {"vipctl.8.md", "vipctl.8"}, {"vipd.toml.5.md", "vipd.toml.5"}}
}

func generate(o options) error {
	root := cli.Command(o.version)
	for _, dir := range []string{"man", "completion"} {
		if err := os.MkdirAll(filepath.Join(o.out, dir), 0o755); err != nil {
			return err
		}
	}
	for _, p := range pages() {
		md, err := os.ReadFile(filepath.Join(o.src, p.src))
		if err != nil {
			return err
		}
		md, err = expand(md, o, root)
		if err != nil {
			return fmt.Errorf("%s: %w", p.src, err)
		}
		if err := os.WriteFile(filepath.Join(o.out, "man", p.out), md2man.Render(md), 0o644); err != nil {
			return err
		}
	}
	files := map[string]string{"bash": "vipctl.bash", "zsh": "_vipctl", "fish": "vipctl.fish"}
	for _, shell := range cli.Shells() {
		name, ok := files[shell]
		if !ok {
			return fmt.Errorf("no completion file name for shell %s", shell)
		}
		var b bytes.Buffer
		if err := cli.WriteCompletion(root, shell, &b); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(o.out, "completion", name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

var (
	directive = regexp.MustCompile(`\{\{([a-z]+)(?: ([^}]+))?\}\}`)
	mdLink    = regexp.MustCompile(`\[([^\]]+)\]\(([^)]+)\)`)
	heading   = regexp.MustCompile(`(?m)^(#+) `)
)

// expand fills a page's directives: {{date}}, {{version}}, {{options}} and
// {{commands}} (vipctl's global flags and commands), {{include FILE}}.
func expand(md []byte, o options, root *cobra.Command) ([]byte, error) {
	var err error
	out := directive.ReplaceAllFunc(md, func(m []byte) []byte {
		sm := directive.FindSubmatch(m)
		switch string(sm[1]) {
		case "date":
			return []byte(o.date)
		case "version":
			return []byte(o.version)
		case "options":
			return []byte(flagList(root.PersistentFlags(), true))
		case "commands":
			return []byte(commands(root))
		case "include":
			b, ierr := include(filepath.Join(o.src, string(sm[2])))
			if ierr != nil {
				err = ierr
			}
			return b
		}
		err = fmt.Errorf("unknown directive %s", m)
		return m
	})
	return out, err
}

// include returns a markdown document from its first second-level heading
// on, with headings moved one level down (they become subsections) and
// relative links reduced to their text.
func include(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if i := bytes.Index(b, []byte("\n## ")); i >= 0 {
		b = b[i+1:]
	}
	b = heading.ReplaceAll(b, []byte("#$1 "))
	b = keyTables(b)
	b = mdLink.ReplaceAllFunc(b, func(m []byte) []byte {
		sm := mdLink.FindSubmatch(m)
		if bytes.HasPrefix(sm[2], []byte("http")) {
			return m
		}
		return sm[1]
	})
	return b, nil
}

// keyTables turns "| key | default | meaning |" tables into definition
// lists: man renders wide tables past the terminal's edge, a list wraps.
func keyTables(md []byte) []byte {
	var out []string
	inTable := false
	for _, line := range strings.Split(string(md), "\n") {
		switch {
		case line == "| key | default | meaning |":
			inTable = true
			continue
		case inTable && strings.HasPrefix(line, "| ---"):
			continue
		case inTable && strings.HasPrefix(line, "| "):
			cells := strings.Split(strings.Trim(line, "| "), " | ")
			if len(cells) == 3 {
				key, def, meaning := strings.Trim(cells[0], "`"), cells[1], cells[2]
				switch def {
				case "required":
					meaning += "; required"
				case "—", "-", "":
				default:
					meaning += "; default: " + def
				}
				out = append(out, "**"+key+"**", ": "+meaning, "")
				continue
			}
		}
		inTable = inTable && strings.HasPrefix(line, "| ")
		out = append(out, line)
	}
	return []byte(strings.Join(out, "\n"))
}

// commands is the COMMANDS section of vipctl(8): every command with its
// synopsis, description and flags.
func commands(root *cobra.Command) string {
	var b strings.Builder
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" {
			continue
		}
		fmt.Fprintf(&b, "### %s\n\n", synopsis(c)) // a subsection (.SS)
		long := c.Long
		if long == "" {
			long = c.Short
		}
		b.WriteString(strings.TrimSpace(long) + "\n\n")
		if fl := flagList(c.LocalNonPersistentFlags(), false); fl != "" {
			b.WriteString(fl)
		}
	}
	return b.String()
}

// synopsis is "vipctl withdraw [--wait] [--timeout DURATION] ...".
func synopsis(c *cobra.Command) string {
	parts := []string{"vipctl " + c.Use}
	c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		if name, _ := pflag.UnquoteUsage(f); name != "" {
			parts = append(parts, "[--"+f.Name+" "+strings.ToUpper(name)+"]")
		} else {
			parts = append(parts, "[--"+f.Name+"]")
		}
	})
	return strings.Join(parts, " ")
}

// flagList is a definition list of fs's flags, with their defaults; help
// and version are listed only when withStd.
func flagList(fs *pflag.FlagSet, withStd bool) string {
	var b strings.Builder
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || (!withStd && f.Name == "help") {
			return
		}
		term := "**--" + f.Name + "**"
		if f.Shorthand != "" {
			term = "**-" + f.Shorthand + "**, " + term
		}
		name, desc := pflag.UnquoteUsage(f)
		if name != "" {
			term += " *" + strings.ToUpper(name) + "*"
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" {
			desc += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(&b, "%s\n: %s\n\n", term, desc)
	})
	if withStd {
		b.WriteString("**-h**, **--help**\n: print the help of vipctl or of a command and exit.\n\n")
		b.WriteString("**-v**, **--version**\n: print the version and exit.\n\n")
	}
	return b.String()
}
