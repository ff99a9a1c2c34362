package main

import (
	"slices"
	"testing"
)

func TestClassify(t *testing.T) {
	for text, want := range map[string]string{
		"Apache License\n Version 2.0, January 2004": "Apache-2.0",
		"Permission is hereby granted, free of charge, to any person ... The above copyright notice and this\npermission notice shall be included": "Expat",
		"Redistribution and use in source and binary forms ... * Neither the name of Google":                                                       "BSD-3-clause",
		"Redistribution and use in source and binary forms, with or without modification":                                                          "BSD-2-clause",
		"SIL OPEN FONT LICENSE Version 1.1 - 26 February 2007":                                                                                     "OFL-1.1",
	} {
		if r, ok := classify(text); !ok || r.Name != want {
			t.Errorf("%.30q: %q %v, want %q", text, r.Name, ok, want)
		}
	}
	if r, ok := classify("All rights reserved. You may not copy this."); ok {
		t.Errorf("a proprietary notice classified as %s", r.Name)
	}
}

func TestCopyrights(t *testing.T) {
	got := copyrights(`Copyright (c) 2014, WAKAYAMA Shirou
All rights reserved.
Copyright ©2013 The Gonum Authors. All rights reserved.
// Copyright 2009 The Go Authors. All rights reserved.
Digitized data copyright (c) 2010 Google Corporation
   Copyright [yyyy] [name of copyright owner]
"Copyright and Similar Rights" means copyright and/or similar rights
    the above copyright notice`)
	want := []string{"2014, WAKAYAMA Shirou", "2013 The Gonum Authors", "2009 The Go Authors", "Digitized data copyright (c) 2010 Google Corporation"}
	if !slices.Equal(got, want) {
		t.Errorf("copyrights %q, want %q", got, want)
	}
}
