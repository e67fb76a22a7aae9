module dpconform.local/runc-wrapper

go 1.26
