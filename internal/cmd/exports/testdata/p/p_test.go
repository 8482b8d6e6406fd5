package p

func Exported() {}
