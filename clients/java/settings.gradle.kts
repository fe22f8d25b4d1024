rootProject.name = "bnc-predict"
