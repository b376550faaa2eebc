package proxy

// ruleLabels name one limit: an app and a rule pattern ("" for the app's
// own).
type ruleLabels struct{ app, api string }
