package argocd

import stdbase64 "encoding/base64"

func base64(s string) string { return stdbase64.StdEncoding.EncodeToString([]byte(s)) }
