// Android Gradle plugin 9 compiles Kotlin itself (built-in Kotlin): no org.jetbrains.kotlin.android plugin.
plugins {
    id("com.android.application") version "9.2.1" apply false
}
