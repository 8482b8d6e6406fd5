package p_test

func Exported() {}
