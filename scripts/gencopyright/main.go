// Command gencopyright writes the Debian package's machine-readable
// copyright file (DEP-5, copyright-format 1.0): isched's own stanza
// (Apache-2.0), then one stanza for every Go module compiled into the given
// main packages, with the module's copyright lines and licence texts as its
// own files say, then the Go standard library's. It asks the go command
// which modules the binaries contain (go list -deps, with the caller's
// GOFLAGS: the build tags of the build), so the file follows go.mod.
// `make install` runs it:
//
//	go run ./scripts/gencopyright ./wrapper ./agent ./coordinator ./relay ./isched > copyright
//
// A module whose licence file it cannot classify fails the run (exit 1,
// naming the module and file): someone must read that licence and add a
// rule below, rather than the package claiming a licence it does not have.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// Module is one Go module the binaries contain.
type Module struct {
	Path, Version, Dir string
}

// licenseRule classifies a licence file by phrases it must contain (all
// of them) and must not contain.
type licenseRule struct {
	Name    string // DEP-5 short name
	Has     []string
	HasNot  []string
	Common  bool   // its text is in /usr/share/common-licenses: named, not copied
	TextRef string // the common-licenses file
}

// rules, most specific first; the phrases are matched on the text with its
// white space collapsed, case-insensitively.
var rules = []licenseRule{
	{Name: "FTL or GPL-2+", Has: []string{"freetype license", "gnu general public license (gpl), version 2 or later"}},
	{Name: "FTL", Has: []string{"the freetype project license"}},
	{Name: "GPL-2", Has: []string{"gnu general public license", "version 2, june 1991"}, Common: true, TextRef: "GPL-2"},
	{Name: "Apache-2.0", Has: []string{"apache license", "version 2.0"}, Common: true, TextRef: "Apache-2.0"},
	{Name: "MPL-2.0", Has: []string{"mozilla public license version 2.0"}, Common: true, TextRef: "MPL-2.0"},
	{Name: "OFL-1.1", Has: []string{"sil open font license", "version 1.1"}},
	{Name: "CC-BY-4.0", Has: []string{"creative commons attribution 4.0 international"}},
	{Name: "BSD-3-clause", Has: []string{"redistribution and use in source and binary forms", "neither the name"}},
	{Name: "BSD-2-clause", Has: []string{"redistribution and use in source and binary forms"}, HasNot: []string{"neither the name", "advertising"}},
	{Name: "Expat", Has: []string{"permission is hereby granted, free of charge", "the above copyright notice and this permission notice shall be included"}},
	{Name: "ISC", Has: []string{"permission to use, copy, modify, and/or distribute this software for any purpose with or without fee is hereby granted"}},
}

var space = regexp.MustCompile(`\s+`)

func classify(text string) (licenseRule, bool) {
	t := strings.ToLower(space.ReplaceAllString(text, " "))
	for _, r := range rules {
		ok := true
		for _, h := range r.Has {
			ok = ok && strings.Contains(t, h)
		}
		for _, h := range r.HasNot {
			ok = ok && !strings.Contains(t, h)
		}
		if ok {
			return r, true
		}
	}
	return licenseRule{}, false
}

// licenseFile: LICENSE, LICENSE.md, LICENSE-SIL, COPYING, licence.txt...
var licenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying)([.-].*)?$`)

// copyrightLine: "Copyright (c) 2014, WAKAYAMA Shirou", "Copyright ©2013
// The Gonum Authors", "Copyright 2012-2015 The Prometheus Authors"; not the
// licences' own templates ("Copyright [yyyy] [name of copyright owner]",
// "Copyright (C) <year> <name of author>") nor "Copyright and Similar
// Rights means" (CC-BY).
var copyrightLine = regexp.MustCompile(`(?i)(^|\s)copyright\s*(\(c\)|©)?\s*(\d{4}|\(c\)|©|by\s)`)

// the field's value: "2014, WAKAYAMA Shirou", not "Copyright (c) 2014,
// WAKAYAMA Shirou. All rights reserved."
var (
	copyrightWord = regexp.MustCompile(`(?i)^copyright\s*(\(c\)|©)?\s*`)
	allRights     = regexp.MustCompile(`(?i)[.,]?\s*all rights reserved\.?$`)
)

func copyrights(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if !copyrightLine.MatchString(l) || strings.ContainsAny(l, "[]<>{}") {
			continue
		}
		l = strings.TrimLeft(l, "/*# \t") // a source file's comment
		l = allRights.ReplaceAllString(copyrightWord.ReplaceAllString(l, ""), "")
		out = append(out, strings.TrimSpace(l))
	}
	return out
}

// stanza is one Files paragraph.
type stanza struct {
	files, comment string
	copyright      []string
	license        string
	texts          []string // licence texts copied into the paragraph
}

func moduleStanza(m Module) (stanza, error) {
	entries, err := os.ReadDir(m.Dir)
	if err != nil {
		return stanza{}, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && licenseFile.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	// golang/freetype keeps the texts its LICENSE names in licenses/
	if sub, err := os.ReadDir(filepath.Join(m.Dir, "licenses")); err == nil {
		for _, e := range sub {
			if !e.IsDir() {
				names = append(names, filepath.Join("licenses", e.Name()))
			}
		}
	}
	if len(names) == 0 {
		return stanza{}, fmt.Errorf("%s@%s: no licence file in %s", m.Path, m.Version, m.Dir)
	}
	sort.Strings(names)
	s := stanza{files: "vendor/" + m.Path + "/*", comment: fmt.Sprintf("Go module %s %s, compiled into the binaries.", m.Path, m.Version)}
	var lic []string
	common := true
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(m.Dir, n))
		if err != nil {
			return stanza{}, err
		}
		b = toUTF8(b)
		r, ok := classify(string(b))
		if !ok {
			return stanza{}, fmt.Errorf("%s@%s: unknown licence in %s: read it and add a rule to scripts/gencopyright", m.Path, m.Version, n)
		}
		switch r.Name {
		case "GPL-2":
			continue // a text a choice names (freetype's licenses/gpl.txt): in common-licenses
		case "FTL":
			// the FreeType licence's text names FreeType's authors, not the module's
		default:
			s.copyright = append(s.copyright, copyrights(string(b))...)
		}
		if !slices.Contains(lic, r.Name) && !strings.Contains(strings.Join(lic, " "), r.Name) {
			lic = append(lic, r.Name)
		}
		if !r.Common {
			common = false
			s.texts = append(s.texts, strings.TrimRight(string(b), "\n \t"))
		}
	}
	// a choice names the texts that follow it ("FTL or GPL-2+" then FTL)
	lic = slices.DeleteFunc(lic, func(n string) bool {
		for _, o := range lic {
			if o != n && strings.Contains(o, n) {
				return true
			}
		}
		return false
	})
	s.license = strings.Join(lic, " and ")
	if common {
		s.texts = nil
	}
	if n, err := os.ReadFile(filepath.Join(m.Dir, "NOTICE")); err == nil {
		s.copyright = append(s.copyright, copyrights(string(n))...)
	}
	if len(s.copyright) == 0 {
		s.copyright = goHeaderCopyright(m.Dir)
	}
	if len(s.copyright) == 0 {
		s.copyright = []string{"The " + m.Path + " authors (its licence names none)"}
	}
	s.copyright = dedupe(s.copyright)
	return s, nil
}

// goHeaderCopyright: the first "// Copyright ..." header among the
// module's Go files (not tests, not testdata), for a module whose licence
// names nobody (go-nvml's is Apache's bare text).
func goHeaderCopyright(dir string) []string {
	var found []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found != nil {
			return filepath.SkipDir
		}
		if d.IsDir() {
			if d.Name() == "testdata" || d.Name() == "examples" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for i := 0; sc.Scan() && i < 10; i++ {
			if c := copyrights(sc.Text()); len(c) > 0 {
				found = c
				return filepath.SkipAll
			}
		}
		return nil
	})
	return found
}

// toUTF8: a licence file that is not UTF-8 is Latin-1 (freetype's
// licenses/ftl.txt); the copyright file must be UTF-8 (lintian's
// national-encoding).
func toUTF8(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return []byte(string(r))
}

func dedupe(in []string) []string {
	var out []string
	for _, s := range in {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// listModules asks the go command for the modules the packages contain.
func listModules(pkgs []string) ([]Module, error) {
	args := append([]string{"list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}\t{{.Version}}\t{{.Dir}}{{end}}{{end}}"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	seen := map[string]bool{}
	var mods []Module
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 3 || seen[f[0]] {
			continue
		}
		if f[2] == "" {
			return nil, fmt.Errorf("module %s %s is not downloaded (go mod download)", f[0], f[1])
		}
		seen[f[0]] = true
		mods = append(mods, Module{Path: f[0], Version: f[1], Dir: f[2]})
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	return mods, nil
}

// field writes a DEP-5 field whose value may span lines.
func field(w io.Writer, name string, lines []string) {
	fmt.Fprintf(w, "%s: %s\n", name, lines[0])
	for _, l := range lines[1:] {
		fmt.Fprintf(w, " %s\n", l)
	}
}

// text writes a multi-line text as continuation lines (" ." for empty).
func text(w io.Writer, t string) {
	for _, l := range strings.Split(t, "\n") {
		l = strings.TrimRight(l, " \t\r")
		if l == "" {
			fmt.Fprintln(w, " .")
			continue
		}
		fmt.Fprintf(w, " %s\n", l)
	}
}

func write(w io.Writer, stanzas []stanza, goroot, goversion string) error {
	fmt.Fprint(w, `Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: isched
Upstream-Contact: isched maintainers <isched@isched.dev>
Source: https://github.com/isched/isched
Comment: The binaries are statically linked Go programs: besides isched's
 own code they contain the Go modules below (the paragraphs named
 vendor/MODULE/*, as go mod vendor would lay them out; versions as in
 go.sum) and the Go standard library. scripts/gencopyright writes this file
 from the modules the build uses.

Files: *
Copyright: 2026 The isched authors
License: Apache-2.0
`)
	used := map[string]bool{"Apache-2.0": true}
	for _, s := range stanzas {
		fmt.Fprintf(w, "\nFiles: %s\n", s.files)
		field(w, "Copyright", s.copyright)
		fmt.Fprintf(w, "License: %s\n", s.license)
		for i, t := range s.texts {
			if i > 0 {
				fmt.Fprintln(w, " .") // between two files' texts
			}
			text(w, t)
		}
		fmt.Fprintf(w, "Comment: %s\n", s.comment)
		if len(s.texts) == 0 {
			for _, n := range strings.Fields(strings.NewReplacer(" or ", " ", " and ", " ").Replace(s.license)) {
				used[n] = true
			}
		} else if strings.Contains(s.license, "GPL-2+") {
			used["GPL-2+"] = true
		}
	}
	if goroot != "" {
		b, err := os.ReadFile(filepath.Join(goroot, "LICENSE"))
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\nFiles: go/src/*\nCopyright: %s\nLicense: BSD-3-clause\n", strings.Join(copyrights(string(b)), "\n "))
		text(w, strings.TrimRight(string(b), "\n"))
		fmt.Fprintf(w, "Comment: The Go standard library and runtime (%s), compiled into every binary.\n", goversion)
	}
	refs := map[string]string{"Apache-2.0": "Apache-2.0", "MPL-2.0": "MPL-2.0", "GPL-2+": "GPL-2"}
	for _, n := range []string{"Apache-2.0", "GPL-2+", "MPL-2.0"} {
		if !used[n] {
			continue
		}
		fmt.Fprintf(w, "\nLicense: %s\n", n)
		text(w, fmt.Sprintf("On Debian systems, the full text of the license can be found in\n/usr/share/common-licenses/%s.", refs[n]))
		delete(used, n)
	}
	delete(used, "FTL") // only ever with its text
	for n := range used {
		return fmt.Errorf("licence %s is named without a text or a common-licenses reference", n)
	}
	return nil
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: gencopyright PACKAGE... (the main packages of the binaries)")
	}
	mods, err := listModules(args)
	if err != nil {
		return err
	}
	var stanzas []stanza
	for _, m := range mods {
		s, err := moduleStanza(m)
		if err != nil {
			return err
		}
		stanzas = append(stanzas, s)
	}
	env, err := exec.Command("go", "env", "GOROOT", "GOVERSION").Output()
	if err != nil {
		return fmt.Errorf("go env: %w", err)
	}
	goenv := strings.Fields(string(env))
	if len(goenv) != 2 {
		return fmt.Errorf("go env GOROOT GOVERSION: %q", env)
	}
	var buf bytes.Buffer
	if err := write(&buf, stanzas, goenv[0], goenv[1]); err != nil {
		return err
	}
	_, err = stdout.Write(buf.Bytes())
	return err
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gencopyright:", err)
		os.Exit(1)
	}
}
